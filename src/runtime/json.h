/* A small JSON reader and writer for the user's tuning file (tuning.c, and
 * `clembed tune`, which compiles this file too), and the UTF-8 and \u helpers
 * that the .safetensors reader shares: RFC 8259 text into a tree,
 * and a tree back into text. Numbers are kept as their text (the tuning
 * reader takes counts only); strings are UTF-8 with their escapes decoded
 * (a string holding a NUL byte is refused). Nesting is bounded (64). */
#ifndef CLEMBED_JSON_H
#define CLEMBED_JSON_H

#include <stddef.h>
#include <stdio.h>

typedef enum ce_jtype { CE_JNULL, CE_JFALSE, CE_JTRUE, CE_JNUMBER, CE_JSTRING, CE_JARRAY, CE_JOBJECT } ce_jtype;

typedef struct ce_json {
  ce_jtype type;
  char *text;             /* a string's bytes, a number's text */
  size_t n;               /* an array's or object's members */
  char **keys;            /* an object's keys, in order */
  struct ce_json *items;  /* the members' values */
  int line;               /* where the value starts (1-based) */
} ce_json;

/* Parses len bytes of text into *out: 0, or -1 with "line N: what" in err. */
int ce_json_parse(const char *text, size_t len, ce_json *out, char *err, size_t errlen);
void ce_json_free(ce_json *v);
/* An object's member named key (the last, where a key repeats), or NULL. */
const ce_json *ce_json_get(const ce_json *obj, const char *key);
/* Writes v as indented JSON (two spaces a level; arrays of scalars and objects
 * of scalars on one line), `indent` levels in. */
void ce_json_write(FILE *f, const ce_json *v, int indent);
/* The value of the four hexadecimal digits at p into *v: 0, or -1 where one is
 * not a hexadecimal digit. */
int ce_hex4(const char *p, unsigned *v);
/* Code point cp (at most U+10FFFF) as UTF-8 at o: its length (1 to 4). */
size_t ce_utf8_put(char *o, unsigned cp);
/* The length of the well-formed UTF-8 sequence of two to four bytes at p
 * (before end), 0 if there is none (an ASCII byte, or bytes that are not UTF-8). */
size_t ce_utf8_seq(const unsigned char *p, const unsigned char *end);
/* Replaces each byte of s that is neither ASCII nor part of well-formed UTF-8
 * by '?'. */
void ce_utf8_clean(char *s);
/* Writes s as a JSON string, quotes included. */
void ce_json_write_string(FILE *f, const char *s);

#endif
