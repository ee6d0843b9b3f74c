/* Contexts: device choice (default rule, CLEMBED_DEVICE, "P:D", type names,
 * case-insensitive name substrings, no match with the device list in the
 * message), create_from_queue (in-order and out-of-order queues, the caller's
 * queue still usable after destroy, reference counts), several contexts at
 * once (same device, same queue, other threads), the thread-local last error,
 * NULL handling, and contexts created and destroyed in a loop.
 *
 * The expected device for every spec is computed here with a plain OpenCL
 * enumeration (platforms in order, devices in order), independently of the
 * library's own matcher. Results of lookups are compared exactly. */
#define _POSIX_C_SOURCE 200809L
#include "test_util.h"

#include <ctype.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

static int oclgrind = 0; /* the test device is Oclgrind's: no threads */

/* ------------------------------------------------------- plain enumeration */

typedef struct dev_entry {
  cl_platform_id platform;
  cl_device_id device;
  unsigned pi, di;
  cl_device_type type;
  char pname[256], dname[256];
  char full[520]; /* "platform name device name" */
} dev_entry;

static dev_entry devs[64];
static size_t ndevs = 0;

static void enumerate(void) {
  cl_platform_id plats[16];
  cl_uint np = 0;
  if (clGetPlatformIDs(16, plats, &np) != CL_SUCCESS) np = 0;
  if (np > 16) np = 16;
  for (cl_uint p = 0; p < np; p++) {
    char pname[256] = "";
    clGetPlatformInfo(plats[p], CL_PLATFORM_NAME, sizeof pname - 1, pname, NULL);
    cl_device_id d[16];
    cl_uint nd = 0;
    if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 16, d, &nd) != CL_SUCCESS) nd = 0;
    if (nd > 16) nd = 16;
    for (cl_uint i = 0; i < nd && ndevs < 64; i++) {
      dev_entry *e = &devs[ndevs++];
      memset(e, 0, sizeof *e);
      e->platform = plats[p];
      e->device = d[i];
      e->pi = p;
      e->di = i;
      memcpy(e->pname, pname, sizeof pname);
      clGetDeviceInfo(d[i], CL_DEVICE_NAME, sizeof e->dname - 1, e->dname, NULL);
      clGetDeviceInfo(d[i], CL_DEVICE_TYPE, sizeof e->type, &e->type, NULL);
      char dname[256];
      memcpy(dname, e->dname, sizeof dname);
      snprintf(e->full, sizeof e->full, "%s %s", pname, dname);
    }
  }
}

static int icontains(const char *hay, const char *needle) {
  size_t n = strlen(needle);
  for (; *hay; hay++) {
    size_t i = 0;
    while (i < n && hay[i] && tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i])) i++;
    if (i == n) return 1;
  }
  return n == 0;
}

static long first_of_type(cl_device_type t) {
  for (size_t i = 0; i < ndevs; i++)
    if (devs[i].type & t) return (long)i;
  return -1;
}

static long first_with_name(const char *sub) {
  for (size_t i = 0; i < ndevs; i++)
    if (icontains(devs[i].full, sub)) return (long)i;
  return -1;
}

static long default_index(void) {
  long i = first_of_type(CL_DEVICE_TYPE_GPU);
  if (i < 0) i = first_of_type(CL_DEVICE_TYPE_ACCELERATOR);
  if (i < 0) i = first_of_type(CL_DEVICE_TYPE_CPU);
  if (i < 0 && ndevs) i = 0;
  return i;
}

static cl_device_id ctx_device(const clembed_context *ctx) {
  cl_device_id d = NULL;
  cl_command_queue q = clembed_context_queue(ctx);
  if (q) clGetCommandQueueInfo(q, CL_QUEUE_DEVICE, sizeof d, &d, NULL);
  return d;
}

static long index_of(cl_device_id d) {
  for (size_t i = 0; i < ndevs; i++)
    if (devs[i].device == d) return (long)i;
  return -1;
}

/* -------------------------------------------------------------- a lookup */

/* Table V x d of known values, lookup of `n` ids, exact comparison. Returns
 * the number of wrong elements (or -1 when a call failed). */
static long check_lookup(clembed_context *ctx, size_t V, size_t d, size_t n, uint64_t seed) {
  long wrong = 0;
  float *w = malloc(V * d * sizeof *w), *got = malloc((n ? n : 1) * d * sizeof *got);
  int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
  for (size_t i = 0; i < V * d; i++) w[i] = tu_rand(&seed);
  for (size_t i = 0; i < n; i++) ids[i] = (int32_t)((i * 7 + seed % 13) % V);
  clembed_matrix t = {0}, o = {0};
  clembed_ids di = {0};
  clembed_status s = clembed_matrix_create(ctx, V, d, CLEMBED_F32, &t);
  if (s == CLEMBED_OK) s = clembed_matrix_write(ctx, &t, w, CLEMBED_F32);
  if (s == CLEMBED_OK) s = clembed_matrix_create(ctx, n, d, CLEMBED_F32, &o);
  if (s == CLEMBED_OK) s = clembed_ids_create(ctx, ids, n, CLEMBED_I32, &di);
  if (s == CLEMBED_OK) s = clembed_lookup(ctx, &t, &di, &o, 0, NULL, NULL);
  if (s == CLEMBED_OK) s = clembed_matrix_read(ctx, &o, got, CLEMBED_F32);
  if (s != CLEMBED_OK) {
    fprintf(stderr, "  lookup failed: %s: %s\n", clembed_status_string(s), clembed_context_message(ctx));
    wrong = -1;
  } else {
    for (size_t i = 0; i < n; i++)
      for (size_t k = 0; k < d; k++)
        if (got[i * d + k] != w[(size_t)ids[i] * d + k]) wrong++;
  }
  clembed_matrix_release(&t);
  clembed_matrix_release(&o);
  clembed_ids_release(&di);
  free(w);
  free(got);
  free(ids);
  return wrong;
}

/* ------------------------------------------------------------ the checks */

/* Creates a context from `spec` and checks it lands on devs[want] (want < 0:
 * CLEMBED_ERR_NO_DEVICE with the device list in the message). */
static void expect_spec(const char *spec, long want) {
  clembed_context *c = (clembed_context *)&c; /* must be overwritten */
  clembed_status s = clembed_context_create(spec, &c);
  if (want < 0) {
    EXPECT(s == CLEMBED_ERR_NO_DEVICE, "spec '%s': %s, expected CLEMBED_ERR_NO_DEVICE", spec ? spec : "(null)",
           clembed_status_string(s));
    EXPECT(c == NULL, "spec '%s': *ctx not set to NULL on failure", spec ? spec : "(null)");
    const char *m = clembed_last_error_message();
    if (ndevs) {
      char first[64];
      snprintf(first, sizeof first, "%u:%u", devs[0].pi, devs[0].di);
      EXPECT(strstr(m, first) != NULL && strstr(m, devs[0].dname) != NULL,
             "spec '%s': the message does not list the devices ('%s'): %s", spec, first, m);
    }
    if (s == CLEMBED_OK) clembed_context_destroy(c);
    return;
  }
  EXPECT(s == CLEMBED_OK, "spec '%s': %s: %s", spec ? spec : "(null)", clembed_status_string(s),
         clembed_last_error_message());
  if (s != CLEMBED_OK) return;
  long got = index_of(ctx_device(c));
  EXPECT(got == want, "spec '%s' chose device %ld (%s), expected %ld (%s)", spec ? spec : "(null)", got,
         got >= 0 ? devs[got].full : "?", want, devs[want].full);
  EXPECT(strcmp(clembed_last_error_message(), "") == 0, "last error message after success: '%s'",
         clembed_last_error_message());
  EXPECT(strcmp(clembed_context_message(c), "") == 0, "context message after creation: '%s'",
         clembed_context_message(c));
  EXPECT(clembed_context_device_name(c)[0] != '\0', "empty device name");
  EXPECT(strstr(clembed_context_device_name(c), devs[want].dname) != NULL, "device name '%s' lacks '%s'",
         clembed_context_device_name(c), devs[want].dname);
  EXPECT(strstr(clembed_context_device_name(c), devs[want].pname) != NULL, "device name '%s' lacks '%s'",
         clembed_context_device_name(c), devs[want].pname);
  clembed_context_destroy(c);
}

static void flip_case(char *s) {
  for (size_t i = 0; s[i]; i++)
    s[i] = (char)((i & 1) ? toupper((unsigned char)s[i]) : tolower((unsigned char)s[i]));
}

static void check_specs(const char *test_spec) {
  char *saved = getenv("CLEMBED_DEVICE") ? strdup(getenv("CLEMBED_DEVICE")) : NULL;

  /* the default rule, with CLEMBED_DEVICE unset and set to "" */
  unsetenv("CLEMBED_DEVICE");
  expect_spec(NULL, default_index());
  expect_spec("", default_index());
  setenv("CLEMBED_DEVICE", "", 1);
  expect_spec(NULL, default_index());

  /* CLEMBED_DEVICE picks the device for NULL and "", not for an explicit spec */
  setenv("CLEMBED_DEVICE", test_spec, 1);
  {
    /* test_spec is "P:D" of the test device */
    unsigned p = 0, d = 0;
    long want = -1;
    sscanf(test_spec, "%u:%u", &p, &d);
    for (size_t i = 0; i < ndevs; i++)
      if (devs[i].pi == p && devs[i].di == d) want = (long)i;
    expect_spec(NULL, want);
    expect_spec("", want);
  }
  setenv("CLEMBED_DEVICE", "no-such-device-anywhere", 1);
  expect_spec(NULL, -1);
  EXPECT(strstr(clembed_last_error_message(), "CLEMBED_DEVICE") != NULL,
         "the message does not say the spec came from CLEMBED_DEVICE: %s", clembed_last_error_message());
  EXPECT(strstr(clembed_last_error_message(), "no-such-device-anywhere") != NULL,
         "the message does not name the spec: %s", clembed_last_error_message());
  expect_spec("0:0", ndevs ? 0 : -1); /* an explicit spec wins over the variable */
  unsetenv("CLEMBED_DEVICE");

  /* "P:D" */
  for (size_t i = 0; i < ndevs; i++) {
    char spec[32];
    snprintf(spec, sizeof spec, "%u:%u", devs[i].pi, devs[i].di);
    expect_spec(spec, (long)i);
  }
  expect_spec("9:9", -1);
  expect_spec("0:77", -1);
  expect_spec("12345:0", -1);

  /* type names: the first device of that type in enumeration order */
  expect_spec("cpu", first_of_type(CL_DEVICE_TYPE_CPU));
  expect_spec("gpu", first_of_type(CL_DEVICE_TYPE_GPU));
  expect_spec("accelerator", first_of_type(CL_DEVICE_TYPE_ACCELERATOR));
  {
    /* "gpu" on this machine: OK (then a GPU) or NO_DEVICE */
    clembed_context *c = NULL;
    clembed_status s = clembed_context_create("gpu", &c);
    EXPECT(s == CLEMBED_OK || s == CLEMBED_ERR_NO_DEVICE, "gpu: %s", clembed_status_string(s));
    if (s == CLEMBED_OK) {
      cl_device_type t = 0;
      clGetDeviceInfo(ctx_device(c), CL_DEVICE_TYPE, sizeof t, &t, NULL);
      EXPECT((t & CL_DEVICE_TYPE_GPU) != 0, "'gpu' gave a device of type %lx", (unsigned long)t);
    }
    clembed_context_destroy(c);
  }

  /* name substrings, case-insensitively, across "platform name device name" */
  for (size_t i = 0; i < ndevs; i++) {
    char sub[64];
    snprintf(sub, sizeof sub, "%.63s", devs[i].dname);
    flip_case(sub);
    expect_spec(sub, first_with_name(sub));
    /* the end of the platform name, the space, the start of the device name */
    size_t pl = strlen(devs[i].pname);
    snprintf(sub, sizeof sub, "%s %.3s", devs[i].pname + (pl > 3 ? pl - 3 : 0), devs[i].dname);
    flip_case(sub);
    expect_spec(sub, first_with_name(sub));
  }
  if (first_with_name("portable") >= 0) { /* POCL */
    expect_spec("portable", first_with_name("portable"));
    expect_spec("PoRtAbLe", first_with_name("portable"));
    expect_spec("PORTABLE COMPUTING", first_with_name("portable"));
  }
  expect_spec("no such device, surely", -1);
  EXPECT(strstr(clembed_last_error_message(), "no such device, surely") != NULL, "message: %s",
         clembed_last_error_message());

  /* a failure followed by a success clears the thread's last message */
  expect_spec("zzz-no-device", -1);
  EXPECT(clembed_last_error_message()[0] != '\0', "no message after a failure");
  {
    clembed_context *c = NULL;
    clembed_status s = clembed_context_create(test_spec, &c);
    EXPECT(s == CLEMBED_OK, "%s", clembed_status_string(s));
    EXPECT(strcmp(clembed_last_error_message(), "") == 0, "stale last error message '%s'",
           clembed_last_error_message());
    clembed_context_destroy(c);
  }

  if (saved) {
    setenv("CLEMBED_DEVICE", saved, 1);
    free(saved);
  } else {
    unsetenv("CLEMBED_DEVICE");
  }
}

static void check_null_handling(const char *spec) {
  FAILS(NULL, CLEMBED_ERR_INVALID_ARGUMENT, clembed_context_create(spec, NULL));
  EXPECT(clembed_last_error_message()[0] != '\0', "no message for a NULL ctx pointer");
  FAILS(NULL, CLEMBED_ERR_INVALID_ARGUMENT, clembed_context_create(NULL, NULL));
  FAILS(NULL, CLEMBED_ERR_INVALID_ARGUMENT, clembed_context_create_from_queue(NULL, NULL));
  clembed_context *c = (clembed_context *)&c;
  FAILS(NULL, CLEMBED_ERR_INVALID_ARGUMENT, clembed_context_create_from_queue(NULL, &c));
  EXPECT(c == NULL, "*ctx not NULL after a failed create_from_queue");
  EXPECT(clembed_last_error_message()[0] != '\0', "no message for a NULL queue");
  clembed_context_destroy(NULL);
  EXPECT(clembed_context_queue(NULL) == NULL, "queue(NULL)");
  EXPECT(clembed_context_device_name(NULL) != NULL && clembed_context_device_name(NULL)[0] == '\0',
         "device_name(NULL)");
  EXPECT(clembed_context_message(NULL) != NULL && clembed_context_message(NULL)[0] == '\0', "message(NULL)");
  FAILS(NULL, CLEMBED_ERR_INVALID_ARGUMENT, clembed_finish(NULL));
  EXPECT(clembed_version_number() == CLEMBED_VERSION_NUMBER, "version %u vs %d", clembed_version_number(),
         CLEMBED_VERSION_NUMBER);
}

/* The context's own state: name, message, finish, queue properties. */
static void check_basic(clembed_context *ctx) {
  EXPECT(clembed_context_device_name(ctx)[0] != '\0', "empty device name");
  EXPECT(strcmp(clembed_context_message(ctx), "") == 0, "message after creation: '%s'", clembed_context_message(ctx));
  EXPECT(clembed_context_queue(ctx) != NULL, "no queue");
  cl_command_queue_properties qp = 0;
  clGetCommandQueueInfo(clembed_context_queue(ctx), CL_QUEUE_PROPERTIES, sizeof qp, &qp, NULL);
  EXPECT(!(qp & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE), "the context's own queue is not in-order");
  OK(ctx, clembed_finish(ctx));
  EXPECT(check_lookup(ctx, 10, 3, 3, 1) == 0, "lookup of 3 ids");
  /* a failure leaves a message that names what was wrong, and the context works on */
  clembed_matrix m;
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_matrix_create(ctx, 2, 2, (clembed_dtype)42, &m));
  EXPECT(strstr(clembed_context_message(ctx), "dtype") != NULL, "message: '%s'", clembed_context_message(ctx));
  EXPECT(check_lookup(ctx, 10, 3, 3, 2) == 0, "lookup after a failure");
  OK(ctx, clembed_finish(ctx));
}

/* Completes a user event from another thread after a delay. */
typedef struct delayed_event {
  cl_event ev;
  long ms;
} delayed_event;

static void *complete_later(void *p) {
  delayed_event *d = p;
  struct timespec ts = {d->ms / 1000, (d->ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
  clSetUserEventStatus(d->ev, CL_COMPLETE);
  return NULL;
}

/* The blocking calls keep program order with work already enqueued through
 * the context, on any queue: a lookup held back by a user event is seen by a
 * later clembed_matrix_read, and does not see a later clembed_matrix_write.
 * (Deterministic: a read that overtakes the lookup returns zeros.) */
static void check_blocking_order(clembed_context *ctx, cl_context cc, const char *what) {
  enum { V = 8, D = 16, N = 32 };
  float w[V * D], w2[V * D], got[N * D];
  int32_t ids[N];
  for (int i = 0; i < V * D; i++) {
    w[i] = (float)(i + 1);
    w2[i] = -(float)(i + 1);
  }
  for (int i = 0; i < N; i++) ids[i] = (i * 5) % V;
  clembed_matrix t = {0}, o = {0};
  clembed_ids di = {0};
  OK(ctx, clembed_matrix_create(ctx, V, D, CLEMBED_F32, &t));
  OK(ctx, clembed_matrix_write(ctx, &t, w, CLEMBED_F32));
  OK(ctx, clembed_matrix_create(ctx, N, D, CLEMBED_F32, &o));
  OK(ctx, clembed_ids_create(ctx, ids, N, CLEMBED_I32, &di));
  for (int round = 0; round < 2; round++) {
    cl_int err;
    delayed_event de = {clCreateUserEvent(cc, &err), 200};
    EXPECT(err == CL_SUCCESS, "clCreateUserEvent: %d", err);
    if (err != CL_SUCCESS) break;
    OK(ctx, clembed_lookup(ctx, &t, &di, &o, 1, &de.ev, NULL));
    pthread_t th;
    pthread_create(&th, NULL, complete_later, &de);
    if (round == 1) OK(ctx, clembed_matrix_write(ctx, &t, w2, CLEMBED_F32)); /* after the lookup */
    memset(got, 0, sizeof got);
    OK(ctx, clembed_matrix_read(ctx, &o, got, CLEMBED_F32));
    pthread_join(th, NULL);
    long wrong = 0;
    for (int i = 0; i < N; i++)
      for (int k = 0; k < D; k++)
        if (got[i * D + k] != w[ids[i] * D + k]) wrong++;
    EXPECT(wrong == 0, "%s: %s: %ld of %d elements differ from the lookup's result", what,
           round ? "a write after a held-back lookup changed its input"
                 : "a read did not wait for a held-back lookup",
           wrong, N * D);
    OK(ctx, clembed_finish(ctx));
    clReleaseEvent(de.ev);
  }
  clembed_matrix_release(&t);
  clembed_matrix_release(&o);
  clembed_ids_release(&di);
}

static cl_uint refcount(cl_command_queue q) {
  cl_uint n = 0;
  clGetCommandQueueInfo(q, CL_QUEUE_REFERENCE_COUNT, sizeof n, &n, NULL);
  return n;
}

/* A user's own OpenCL context and queue: the library joins it, the queue
 * survives the library context, the user's own cl_mem buffers work. */
static void check_from_queue(cl_device_id dev, cl_command_queue_properties props) {
  cl_int err;
  cl_context cc = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
  EXPECT(err == CL_SUCCESS, "clCreateContext: %d", err);
  if (err != CL_SUCCESS) return;
  cl_command_queue q = clCreateCommandQueue(cc, dev, props, &err);
  EXPECT(err == CL_SUCCESS, "clCreateCommandQueue(props %lx): %d", (unsigned long)props, err);
  if (err != CL_SUCCESS) {
    clReleaseContext(cc);
    return;
  }
  cl_uint rc0 = refcount(q);
  clembed_context *ctx = NULL;
  clembed_status s = clembed_context_create_from_queue(q, &ctx);
  EXPECT(s == CLEMBED_OK, "create_from_queue(props %lx): %s: %s", (unsigned long)props, clembed_status_string(s),
         clembed_last_error_message());
  if (s == CLEMBED_OK) {
    EXPECT(clembed_context_queue(ctx) == q, "the context does not use the given queue");
    /* (OpenCL implementations hold references of their own while commands
     * are in flight, e.g. POCL; only the direction of change is checked) */
    EXPECT(refcount(q) > rc0, "queue reference count %u after create, was %u", refcount(q), rc0);
    EXPECT(clembed_context_device_name(ctx)[0] != '\0', "empty device name");
    EXPECT(strcmp(clembed_context_message(ctx), "") == 0, "message: '%s'", clembed_context_message(ctx));

    /* 3 ids through the library's own buffers */
    EXPECT(check_lookup(ctx, 7, 5, 3, 11) == 0, "lookup of 3 ids (props %lx)", (unsigned long)props);

    /* the user's own buffers, filled into the structs */
    float w[4 * 3];
    int64_t ids[3] = {3, 0, 2};
    float got[3 * 3];
    for (int i = 0; i < 12; i++) w[i] = (float)i * 0.5f - 1.0f;
    cl_mem bw = clCreateBuffer(cc, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof w, w, &err);
    cl_mem bi = clCreateBuffer(cc, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof ids, ids, &err);
    cl_mem bo = clCreateBuffer(cc, CL_MEM_READ_WRITE, sizeof got, NULL, &err);
    clembed_matrix t = {bw, 0, 4, 3, 3, CLEMBED_F32}, o = {bo, 0, 3, 3, 0, CLEMBED_F32};
    clembed_ids di = {bi, 0, 3, CLEMBED_I64};
    cl_event ev = NULL;
    OK(ctx, clembed_lookup(ctx, &t, &di, &o, 0, NULL, &ev));
    if (ev) {
      /* the caller's own read, ordered by the returned event */
      err = clEnqueueReadBuffer(q, bo, CL_TRUE, 0, sizeof got, got, 1, &ev, NULL);
      EXPECT(err == CL_SUCCESS, "read: %d", err);
      long wrong = 0;
      for (int i = 0; i < 3; i++)
        for (int k = 0; k < 3; k++)
          if (got[i * 3 + k] != w[ids[i] * 3 + k]) wrong++;
      EXPECT(wrong == 0, "%ld wrong elements in the user's buffer", wrong);
      clReleaseEvent(ev);
    }
    OK(ctx, clembed_finish(ctx));

    /* a bad id is reported through finish on this queue too */
    ids[1] = 99;
    err = clEnqueueWriteBuffer(q, bi, CL_TRUE, 0, sizeof ids, ids, 0, NULL, NULL);
    OK(ctx, clembed_lookup(ctx, &t, &di, &o, 0, NULL, NULL));
    FAILS(ctx, CLEMBED_ERR_INDEX_OUT_OF_RANGE, clembed_finish(ctx));
    EXPECT(strstr(clembed_context_message(ctx), "ids[1] = 99") != NULL, "message: %s",
           clembed_context_message(ctx));
    OK(ctx, clembed_finish(ctx));

    /* (Oclgrind: no threads; POCL's basic device: its user events hang, tu_user_events_gate) */
    if (!oclgrind && tu_user_events_gate(ctx_device(ctx)))
      check_blocking_order(ctx, cc, props ? "out-of-order queue" : "in-order queue");

    /* work enqueued and then read at once through the blocking read (an
     * out-of-order queue must still see the finished lookup) */
    for (int rep = 0; rep < 5; rep++) {
      long w2 = check_lookup(ctx, 300, 64, tu_small ? 50 : 2000, 100 + (uint64_t)rep);
      EXPECT(w2 == 0, "lookup then read (props %lx, rep %d): %ld wrong", (unsigned long)props, rep, w2);
    }

    clFinish(q);
    cl_uint rc1 = refcount(q);
    clembed_context_destroy(ctx);
    EXPECT(refcount(q) < rc1, "queue reference count %u after destroy, %u before: not released", refcount(q),
           rc1);
    /* the queue is still usable */
    EXPECT(clFinish(q) == CL_SUCCESS, "clFinish on the caller's queue after destroy");
    float back[12] = {0};
    err = clEnqueueReadBuffer(q, bw, CL_TRUE, 0, sizeof back, back, 0, NULL, NULL);
    EXPECT(err == CL_SUCCESS && back[5] == w[5], "read on the caller's queue after destroy: %d", err);
    clReleaseMemObject(bw);
    clReleaseMemObject(bi);
    clReleaseMemObject(bo);
  }
  clReleaseCommandQueue(q);
  clReleaseContext(cc);
}

/* Two library contexts on one queue (one cl_context: shared programs), and
 * two on separate queues of one cl_context; one destroyed while the other
 * still uses the shared programs. */
static void check_shared(cl_device_id dev) {
  cl_int err;
  cl_context cc = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
  if (err != CL_SUCCESS) return;
  cl_command_queue q1 = clCreateCommandQueue(cc, dev, 0, &err);
  cl_command_queue q2 = clCreateCommandQueue(cc, dev, 0, &err);
  clembed_context *a = NULL, *b = NULL, *c = NULL;
  OK(NULL, clembed_context_create_from_queue(q1, &a));
  OK(NULL, clembed_context_create_from_queue(q1, &b));
  OK(NULL, clembed_context_create_from_queue(q2, &c));
  if (a && b && c) {
    EXPECT(check_lookup(a, 20, 7, 9, 1) == 0, "context a");
    EXPECT(check_lookup(b, 20, 7, 9, 2) == 0, "context b");
    clembed_context_destroy(a);
    a = NULL;
    EXPECT(check_lookup(b, 20, 7, 9, 3) == 0, "context b after a was destroyed");
    EXPECT(check_lookup(c, 20, 7, 9, 4) == 0, "context c after a was destroyed");
    clembed_context_destroy(b);
    b = NULL;
    EXPECT(check_lookup(c, 21, 7, 9, 5) == 0, "context c after a and b were destroyed");
    EXPECT(clFinish(q1) == CL_SUCCESS, "q1 after its contexts were destroyed");
  }
  clembed_context_destroy(a);
  clembed_context_destroy(b);
  clembed_context_destroy(c);
  clReleaseCommandQueue(q1);
  clReleaseCommandQueue(q2);
  clReleaseContext(cc);
}

/* Two contexts of their own on the same device, interleaved. */
static void check_two_at_once(const char *spec) {
  clembed_context *a = NULL, *b = NULL;
  OK(NULL, clembed_context_create(spec, &a));
  OK(NULL, clembed_context_create(spec, &b));
  if (!a || !b) {
    clembed_context_destroy(a);
    clembed_context_destroy(b);
    return;
  }
  EXPECT(a != b && clembed_context_queue(a) != clembed_context_queue(b), "two contexts share a queue");
  float wa[6] = {1, 2, 3, 4, 5, 6}, wb[6] = {-1, -2, -3, -4, -5, -6}, ga[6], gb[6];
  int32_t ids[3] = {2, 0, 1};
  clembed_matrix ta = {0}, tb = {0}, oa = {0}, ob = {0};
  clembed_ids ia = {0}, ib = {0};
  OK(a, clembed_matrix_create(a, 3, 2, CLEMBED_F32, &ta));
  OK(b, clembed_matrix_create(b, 3, 2, CLEMBED_F32, &tb));
  OK(a, clembed_matrix_write(a, &ta, wa, CLEMBED_F32));
  OK(b, clembed_matrix_write(b, &tb, wb, CLEMBED_F32));
  OK(a, clembed_matrix_create(a, 3, 2, CLEMBED_F32, &oa));
  OK(b, clembed_matrix_create(b, 3, 2, CLEMBED_F32, &ob));
  OK(a, clembed_ids_create(a, ids, 3, CLEMBED_I32, &ia));
  OK(b, clembed_ids_create(b, ids, 3, CLEMBED_I32, &ib));
  OK(a, clembed_lookup(a, &ta, &ia, &oa, 0, NULL, NULL));
  OK(b, clembed_lookup(b, &tb, &ib, &ob, 0, NULL, NULL));
  /* a bad id in b only: a's finish is clean */
  int32_t bad[3] = {0, 5, 1};
  clembed_ids ibad = {0};
  OK(b, clembed_ids_create(b, bad, 3, CLEMBED_I32, &ibad));
  clembed_matrix ob2 = {0};
  OK(b, clembed_matrix_create(b, 3, 2, CLEMBED_F32, &ob2));
  OK(b, clembed_lookup(b, &tb, &ibad, &ob2, 0, NULL, NULL));
  OK(a, clembed_finish(a));
  OK(a, clembed_matrix_read(a, &oa, ga, CLEMBED_F32));
  FAILS(b, CLEMBED_ERR_INDEX_OUT_OF_RANGE, clembed_matrix_read(b, &ob, gb, CLEMBED_F32));
  OK(b, clembed_finish(b));
  for (int i = 0; i < 3; i++)
    for (int k = 0; k < 2; k++) {
      EXPECT(ga[i * 2 + k] == wa[ids[i] * 2 + k], "context a: [%d][%d] = %g", i, k, ga[i * 2 + k]);
      EXPECT(gb[i * 2 + k] == wb[ids[i] * 2 + k], "context b: [%d][%d] = %g", i, k, gb[i * 2 + k]);
    }
  clembed_matrix_release(&ta);
  clembed_matrix_release(&tb);
  clembed_matrix_release(&oa);
  clembed_matrix_release(&ob);
  clembed_matrix_release(&ob2);
  clembed_ids_release(&ia);
  clembed_ids_release(&ib);
  clembed_ids_release(&ibad);
  clembed_context_destroy(b);
  /* a works on after b is gone */
  EXPECT(check_lookup(a, 10, 4, 6, 9) == 0, "context a after b was destroyed");
  clembed_context_destroy(a);
}

/* Contexts in other threads: their own work, and the thread-local last error. */
typedef struct thread_arg {
  const char *spec;
  cl_command_queue queue; /* non-NULL: create_from_queue */
  int rounds;
  long wrong;
  int failed;
  char last_error[256];
} thread_arg;

static void *thread_main(void *p) {
  thread_arg *t = p;
  clembed_context *c = NULL;
  clembed_status s;
  /* a failure first: this thread's message, nobody else's */
  clembed_context *none = NULL;
  clembed_context_create("thread-local-no-such-device", &none);
  snprintf(t->last_error, sizeof t->last_error, "%s", clembed_last_error_message());
  s = t->queue ? clembed_context_create_from_queue(t->queue, &c) : clembed_context_create(t->spec, &c);
  if (s != CLEMBED_OK) {
    t->failed = 1;
    return NULL;
  }
  for (int r = 0; r < t->rounds; r++) {
    long w = check_lookup(c, 50, 9, 40, (uint64_t)r);
    if (w) t->wrong += w < 0 ? 1000000 : w;
  }
  clembed_context_destroy(c);
  return NULL;
}

static void check_threads(const char *spec, cl_device_id dev) {
  cl_int err;
  cl_context cc = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
  cl_command_queue q1 = clCreateCommandQueue(cc, dev, 0, &err);
  cl_command_queue q2 = clCreateCommandQueue(cc, dev, 0, &err);
  int rounds = tu_small ? 2 : 10;
  thread_arg args[4] = {{spec, NULL, rounds, 0, 0, ""},
                        {spec, NULL, rounds, 0, 0, ""},
                        {NULL, q1, rounds, 0, 0, ""}, /* these two share one cl_context's programs */
                        {NULL, q2, rounds, 0, 0, ""}};
  pthread_t th[4];
  clembed_context *none = NULL;
  clembed_context_create("main-thread-no-such-device", &none);
  for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, thread_main, &args[i]);
  for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < 4; i++) {
    EXPECT(!args[i].failed, "thread %d could not create its context", i);
    EXPECT(args[i].wrong == 0, "thread %d: %ld wrong elements", i, args[i].wrong);
    EXPECT(strstr(args[i].last_error, "thread-local-no-such-device") != NULL, "thread %d's last error: %s", i,
           args[i].last_error);
  }
  EXPECT(strstr(clembed_last_error_message(), "main-thread-no-such-device") != NULL,
         "the main thread's last error was changed by another thread: %s", clembed_last_error_message());
  clReleaseCommandQueue(q1);
  clReleaseCommandQueue(q2);
  clReleaseContext(cc);
}

/* Contexts created and destroyed in a loop, each with matrices and ids. */
static void check_loop(const char *spec) {
  int n = tu_small ? 8 : 50;
  long bad = 0;
  for (int i = 0; i < n; i++) {
    clembed_context *c = NULL;
    clembed_status s = clembed_context_create(spec, &c);
    if (s != CLEMBED_OK) {
      EXPECT(0, "create %d: %s: %s", i, clembed_status_string(s), clembed_last_error_message());
      break;
    }
    long w = check_lookup(c, 64, 17, 33, (uint64_t)i);
    if (w) bad++;
    /* every other time, leave work queued and a deferred error pending: destroy must cope */
    if (i & 1) {
      clembed_matrix t = {0}, o = {0};
      clembed_ids di = {0};
      int32_t ids[2] = {0, 1000};
      clembed_matrix_create(c, 4, 4, CLEMBED_F32, &t);
      clembed_matrix_create(c, 2, 4, CLEMBED_F32, &o);
      clembed_ids_create(c, ids, 2, CLEMBED_I32, &di);
      clembed_lookup(c, &t, &di, &o, 0, NULL, NULL);
      clembed_matrix_release(&t);
      clembed_matrix_release(&o);
      clembed_ids_release(&di);
    }
    clembed_context_destroy(c);
  }
  EXPECT(bad == 0, "%ld of %d loop iterations gave wrong lookups", bad, n);
}

/* CLEMBED_TUNING: cpu and gpu in any case, empty as unset; anything else
 * fails the context with a message naming the value. */
static void check_tuning(void) {
  const char *old = getenv("CLEMBED_TUNING");
  char *saved = old ? strdup(old) : NULL;
  const char *good[] = {"cpu", "GPU", "Cpu", ""};
  for (int i = 0; i < 4; i++) {
    setenv("CLEMBED_TUNING", good[i], 1);
    clembed_context *c = NULL;
    clembed_status s = clembed_context_create(NULL, &c);
    EXPECT(s == CLEMBED_OK && c, "CLEMBED_TUNING='%s': %s %s", good[i], clembed_status_string(s),
           clembed_last_error_message());
    clembed_context_destroy(c);
  }
  setenv("CLEMBED_TUNING", "fast", 1);
  clembed_context *c = (clembed_context *)&c;
  clembed_status s = clembed_context_create(NULL, &c);
  EXPECT(s == CLEMBED_ERR_INVALID_ARGUMENT && c == NULL, "CLEMBED_TUNING=fast: %s", clembed_status_string(s));
  EXPECT(strstr(clembed_last_error_message(), "CLEMBED_TUNING is 'fast'") != NULL, "message: %s",
         clembed_last_error_message());
  if (saved) {
    setenv("CLEMBED_TUNING", saved, 1);
    free(saved);
  } else {
    unsetenv("CLEMBED_TUNING");
  }
}

/* ------------------------------ the message when no platform lists a device */

/* `test_context no_device_child`: a fresh process (the ICD loader reads its
 * environment once) prints the status and message of a default create. */
static int no_device_child(void) {
  clembed_context *c = NULL;
  clembed_status s = clembed_context_create(NULL, &c);
  printf("%d\n%s\n", (int)s, clembed_last_error_message());
  clembed_context_destroy(c);
  return 0;
}

/* Runs the child with `env` (arguments of env(1)); returns its status, its
 * output in out. */
static int run_no_device_child(const char *self, const char *env, char *out, size_t len) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd,
           "env -u POCL_CACHE_DIR -u XDG_CACHE_HOME -u OCL_ICD_FILENAMES -u CLEMBED_DEVICE -u RUSTICL_ENABLE "
           "%s '%s' no_device_child 2>/dev/null", env, self);
  out[0] = '\0';
  FILE *f = popen(cmd, "r");
  if (!f) return 1;
  size_t n = fread(out, 1, len - 1, f);
  out[n] = '\0';
  pclose(f);
  return atoi(out);
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  EXPECT(f != NULL, "cannot write %s", path);
  if (!f) return;
  fputs(text, f);
  fclose(f);
}

/* No platform at all: the package to install. Only POCL, which cannot create
 * its kernel cache (HOME under a regular file, so even root cannot): the
 * platform named, POCL_CACHE_DIR and the directory, no package; and with
 * POCL_CACHE_DIR set, a device. */
static void check_no_device_message(void) {
  char self[1024], dir[] = "/tmp/clembed-nodev-XXXXXX", path[1200], env[3000], out[4096];
  ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
  if (sl <= 0 || !mkdtemp(dir)) {
    EXPECT(0, "no device message: cannot set up (/proc/self/exe, mkdtemp)");
    return;
  }
  self[sl] = '\0';
  snprintf(path, sizeof path, "%s/none", dir);
  mkdir(path, 0755);
  snprintf(env, sizeof env, "OCL_ICD_VENDORS='%s/none'", dir);
  int st = run_no_device_child(self, env, out, sizeof out);
  EXPECT(st == CLEMBED_ERR_NO_DEVICE, "no platform: status %d: %s", st, out);
  EXPECT(strstr(out, "no OpenCL platform is installed") && strstr(out, "apt-get install pocl-opencl-icd"),
         "no platform: the message does not say so: %s", out);

  char icd[512] = "";
  FILE *f = fopen("/etc/OpenCL/vendors/pocl.icd", "r");
  if (f) {
    if (!fgets(icd, sizeof icd, f)) icd[0] = '\0';
    fclose(f);
  }
  if (!icd[0]) {
    printf("POCL is not installed: its no-device message is not tested\n");
  } else {
    snprintf(path, sizeof path, "%s/pocl", dir);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/pocl/pocl.icd", dir);
    write_file(path, icd);
    snprintf(path, sizeof path, "%s/homefile", dir);
    write_file(path, "not a directory\n");
    snprintf(env, sizeof env, "OCL_ICD_VENDORS='%s/pocl' HOME='%s/homefile/home'", dir, dir);
    st = run_no_device_child(self, env, out, sizeof out);
    char want[1400];
    snprintf(want, sizeof want, "%s/homefile/home/.cache/pocl/kcache", dir);
    EXPECT(st == CLEMBED_ERR_NO_DEVICE, "POCL without a cache: status %d: %s", st, out);
    EXPECT(strstr(out, "1 platform (Portable Computing Language) lists no device") != NULL,
           "POCL without a cache: the platform is not named: %s", out);
    EXPECT(strstr(out, "POCL_CACHE_DIR") && strstr(out, want), "POCL without a cache: no POCL_CACHE_DIR or %s: %s",
           want, out);
    EXPECT(strstr(out, "apt-get") == NULL, "POCL without a cache: the message points to a package: %s", out);
    snprintf(path, sizeof path, "%s/cache", dir);
    mkdir(path, 0755);
    snprintf(env, sizeof env, "OCL_ICD_VENDORS='%s/pocl' HOME='%s/homefile/home' POCL_CACHE_DIR='%s/cache'", dir, dir,
             dir);
    st = run_no_device_child(self, env, out, sizeof out);
    EXPECT(st == CLEMBED_OK, "POCL with POCL_CACHE_DIR set: status %d: %s", st, out);
  }
  snprintf(path, sizeof path, "rm -rf '%s'", dir);
  EXPECT(system(path) == 0, "%s failed", path);
}

/* ------------------------------------------------------------ the cases */

static char g_spec[32] = "0:0"; /* the test device as "P:D" */
static cl_device_id g_dev;
static cl_command_queue_properties g_queue_props;

/* The plain enumeration, and where the test device is in it. */
static void setup(clembed_context *ctx) {
  enumerate();
  EXPECT(ndevs > 0, "no device enumerated");
  g_dev = ctx_device(ctx);
  long ti = index_of(g_dev);
  EXPECT(ti >= 0, "the test device is not in the enumeration");
  if (ti >= 0) snprintf(g_spec, sizeof g_spec, "%u:%u", devs[ti].pi, devs[ti].di);
  printf("test device %s: %s\n", g_spec, ti >= 0 ? devs[ti].full : "?");
  oclgrind = ti >= 0 && icontains(devs[ti].pname, "oclgrind");
  clGetDeviceInfo(g_dev, CL_DEVICE_QUEUE_PROPERTIES, sizeof g_queue_props, &g_queue_props, NULL);
}

TU_CASE(basic_context) { check_basic(ctx); }

TU_CASE(tuning_environment_variable) { check_tuning(); }

TU_CASE(null_handling) { check_null_handling(g_spec); }

TU_CASE(device_specs_choose_the_expected_device) { check_specs(g_spec); }

TU_CASE(from_in_order_queue) { check_from_queue(g_dev, 0); }

TU_CASE(from_out_of_order_queue) {
  if (g_queue_props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE)
    check_from_queue(g_dev, CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE);
  else
    tu_skip("the device has no out-of-order queues");
}

TU_CASE(from_profiling_queue) {
  if (g_queue_props & CL_QUEUE_PROFILING_ENABLE) check_from_queue(g_dev, CL_QUEUE_PROFILING_ENABLE);
  else tu_skip("the device has no profiling queues");
}

TU_CASE(contexts_sharing_a_queue) { check_shared(g_dev); }

TU_CASE(two_contexts_at_once) { check_two_at_once(g_spec); }

/* Oclgrind runs kernels in the calling thread and cannot run two at once (it
 * asserts): the threads are left to real implementations */
TU_CASE(contexts_in_threads) {
  if (!oclgrind) check_threads(g_spec, g_dev);
  else tu_skip("Oclgrind cannot run kernels in two threads at once");
}

TU_CASE(create_and_destroy_in_a_loop) { check_loop(g_spec); }

TU_CASE(no_device_message) { check_no_device_message(); }

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "no_device_child")) return no_device_child();
  return tu_main(argc, argv, (tu_suite){.name = "test_context", .device = 1, .setup = setup});
}
