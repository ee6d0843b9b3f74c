/* Private to src/io: an opened file (file.c), as the loaders (load.c) see it. */
#ifndef CLEMBED_IO_FILE_H
#define CLEMBED_IO_FILE_H

#include "io.h"

struct clembed_file {
  char *path;
  const uint8_t *map; /* the whole file, read-only; NULL when it is empty */
  size_t size;
  int fd;             /* kept open for the loaders' own mappings (load.c); -1 when none */
  int borrowed;       /* map is the caller's memory (clembed_file_open_memory): not unmapped */
  ce_io_table table;
};

/* The tensor `name` (NULL: the only one, or a GGUF file's token_embd.weight);
 * otherwise CLEMBED_ERR_INVALID_ARGUMENT with a message naming the file and
 * listing its tensors in msg. */
clembed_status ce_file_lookup(const clembed_file *f, const char *name, size_t *i, char *msg, size_t cap);
/* "'a', 'b', ..." (cut with "..." to fit). */
void ce_file_list(const clembed_file *f, char *buf, size_t cap);

#endif
