/* The API additions of 0.2: device listing, structured error detail, padding
 * counted from the end (CLEMBED_NO_PADDING is INT64_MIN), failed device work
 * reported by finish and blocking reads, buffers and events of another
 * cl_context refused, joining a queue held back by a user event, and the WRAP
 * policy's range in messages. Each case is named; `test_api NAME` runs one. A
 * case that blocks for 120 s (a deadlock) fails the test instead of hanging it. */
#include "test_util.h"

typedef struct fixture {
  clembed_matrix table, out;
  clembed_ids ids;
  size_t V, D;
} fixture;

/* table[v][c] = v + c / 8 (exact in float), ids given. */
static int fixture_make(clembed_context *ctx, fixture *f, size_t V, size_t D, const int32_t *ids, size_t n) {
  memset(f, 0, sizeof *f);
  f->V = V;
  f->D = D;
  float *w = malloc(V * D * sizeof *w);
  if (!w) return 0;
  for (size_t v = 0; v < V; v++)
    for (size_t c = 0; c < D; c++) w[v * D + c] = (float)v + (float)c / 8.0f;
  clembed_status s = clembed_matrix_create(ctx, V, D, CLEMBED_F32, &f->table);
  if (s == CLEMBED_OK) s = clembed_matrix_write(ctx, &f->table, w, CLEMBED_F32);
  if (s == CLEMBED_OK) s = clembed_ids_create(ctx, ids, n, CLEMBED_I32, &f->ids);
  if (s == CLEMBED_OK) s = clembed_matrix_create(ctx, n, D, CLEMBED_F32, &f->out);
  free(w);
  EXPECT(s == CLEMBED_OK, "fixture: %s: %s", clembed_status_string(s), clembed_context_message(ctx));
  return s == CLEMBED_OK;
}

static void fixture_release(fixture *f) {
  clembed_matrix_release(&f->table);
  clembed_matrix_release(&f->out);
  clembed_ids_release(&f->ids);
}

static void expect_detail(const clembed_context *ctx, clembed_status st, const char *op, const char *arg,
                          int64_t index, int64_t value, const char *what) {
  clembed_error_detail d;
  memset(&d, 0xAB, sizeof d);
  clembed_status s = clembed_context_error(ctx, &d);
  EXPECT(s == CLEMBED_OK, "%s: clembed_context_error: %s", what, clembed_status_string(s));
  if (s != CLEMBED_OK) return;
  EXPECT(d.status == st, "%s: status %s, expected %s", what, clembed_status_string(d.status),
         clembed_status_string(st));
  EXPECT(d.operation && !strcmp(d.operation, op), "%s: operation '%s', expected '%s'", what,
         d.operation ? d.operation : "(null)", op);
  EXPECT(d.argument && !strcmp(d.argument, arg), "%s: argument '%s', expected '%s'", what,
         d.argument ? d.argument : "(null)", arg);
  EXPECT(d.index == index, "%s: index %lld, expected %lld", what, (long long)d.index, (long long)index);
  EXPECT(d.value == value, "%s: value %lld, expected %lld", what, (long long)d.value, (long long)value);
}

/* ------------------------------------------------------------------ cases */

static cl_context cl_context_of(clembed_context *ctx) {
  cl_context c = NULL;
  clGetCommandQueueInfo(clembed_context_queue(ctx), CL_QUEUE_CONTEXT, sizeof c, &c, NULL);
  return c;
}

static cl_device_id cl_device_of(clembed_context *ctx) {
  cl_device_id d = NULL;
  clGetCommandQueueInfo(clembed_context_queue(ctx), CL_QUEUE_DEVICE, sizeof d, &d, NULL);
  return d;
}


TU_CASE(version) {
  (void)ctx;
  EXPECT(CLEMBED_VERSION_MAJOR == 0 && CLEMBED_VERSION_MINOR == 4 && CLEMBED_VERSION_PATCH == 0,
         "header version %d.%d.%d, expected 0.4.0", CLEMBED_VERSION_MAJOR, CLEMBED_VERSION_MINOR,
         CLEMBED_VERSION_PATCH);
  EXPECT(clembed_version_number() == 400, "library version %u, expected 400", clembed_version_number());
}

TU_CASE(devices) {
  size_t count = 12345;
  OK(ctx, clembed_devices(NULL, 0, &count));
  EXPECT(count >= 1 && count < 12345, "count %zu", count);
  if (count < 1 || count > 64) return;
  clembed_device_info *list = calloc(count + 1, sizeof *list);
  size_t again = 0;
  memset(&list[count], 0x5A, sizeof list[count]);
  OK(ctx, clembed_devices(list, count, &again));
  EXPECT(again == count, "second count %zu, first %zu", again, count);
  unsigned char guard[sizeof list[count]];
  memset(guard, 0x5A, sizeof guard);
  EXPECT(!memcmp(&list[count], guard, sizeof guard), "an entry past the capacity was written");
  int defaults = 0;
  for (size_t i = 0; i < count; i++) {
    clembed_device_info *d = &list[i];
    unsigned p, q;
    char extra;
    EXPECT(sscanf(d->spec, "%u:%u%c", &p, &q, &extra) == 2, "device %zu: spec '%s'", i, d->spec);
    EXPECT(d->name[0] != '\0' && d->platform[0] != '\0', "device %zu: empty name or platform", i);
    EXPECT(d->type != 0, "device %zu: type 0", i);
    EXPECT(d->global_mem_bytes > 0 && d->max_alloc_bytes > 0 && d->max_alloc_bytes <= d->global_mem_bytes,
           "device %zu: memory %llu, largest allocation %llu", i, (unsigned long long)d->global_mem_bytes,
           (unsigned long long)d->max_alloc_bytes);
    defaults += d->is_default != 0;
    /* the spec opens the device it names */
    clembed_context *c = NULL;
    clembed_status s = clembed_context_create(d->spec, &c);
    EXPECT(s == CLEMBED_OK, "device %zu: context on '%s': %s", i, d->spec, clembed_status_string(s));
    if (c) {
      char want[300];
      snprintf(want, sizeof want, "%s / %s", d->platform, d->name);
      EXPECT(!strcmp(clembed_context_device_name(c), want), "device %zu: '%s' opens '%s'", i, want,
             clembed_context_device_name(c));
      if (d->is_default)
        EXPECT(!strcmp(clembed_context_device_name(ctx), want), "default '%s' but a NULL spec opens '%s'", want,
               clembed_context_device_name(ctx));
    }
    clembed_context_destroy(c);
  }
  EXPECT(defaults == 1, "%d devices marked default", defaults);
  /* a smaller capacity fills only that many */
  clembed_device_info one[2];
  memset(one, 0x5A, sizeof one);
  OK(ctx, clembed_devices(one, 1, &again));
  EXPECT(again == count && !strcmp(one[0].spec, list[0].spec), "capacity 1: count %zu, spec '%s'", again,
         one[0].spec);
  EXPECT(!memcmp(&one[1], guard, sizeof guard), "capacity 1 wrote a second entry");
  EXPECT(clembed_devices(NULL, 0, NULL) == CLEMBED_ERR_INVALID_ARGUMENT, "count NULL accepted");
  EXPECT(clembed_devices(NULL, 3, &again) == CLEMBED_ERR_INVALID_ARGUMENT, "list NULL with capacity 3 accepted");
  free(list);
}

TU_CASE(detail_arguments) {
  int32_t ids[4] = {0, 1, 2, 3};
  fixture f;
  if (!fixture_make(ctx, &f, 8, 5, ids, 4)) return;
  /* an output of the wrong shape */
  clembed_matrix small = f.out;
  small.rows = 3;
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_embed(ctx, &f.table, &f.ids, NULL, &small, 0, NULL, NULL));
  expect_detail(ctx, CLEMBED_ERR_INVALID_ARGUMENT, "clembed_embed", "out", -1, 3, "out rows");
  /* a NULL table */
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_lookup(ctx, NULL, &f.ids, &f.out, 0, NULL, NULL));
  expect_detail(ctx, CLEMBED_ERR_INVALID_ARGUMENT, "clembed_lookup", "table", -1, 0, "table NULL");
  /* a padding id outside the table */
  clembed_embed_options o = clembed_embed_defaults();
  o.padding_idx = 8;
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_embed(ctx, &f.table, &f.ids, &o, &f.out, 0, NULL, NULL));
  expect_detail(ctx, CLEMBED_ERR_INVALID_ARGUMENT, "clembed_embed", "padding_idx", -1, 8, "padding_idx 8");
  /* a NULL event in a wait list, element 1 */
  cl_event evs[2] = {NULL, NULL};
  cl_int err;
  evs[0] = clCreateUserEvent(cl_context_of(ctx), &err);
  if (evs[0]) {
    clSetUserEventStatus(evs[0], CL_COMPLETE);
    FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_lookup(ctx, &f.table, &f.ids, &f.out, 2, evs, NULL));
    expect_detail(ctx, CLEMBED_ERR_INVALID_ARGUMENT, "clembed_lookup", "event_wait_list", 1, 0, "NULL event 1");
    clReleaseEvent(evs[0]);
  }
  /* the backward names its own operation */
  clembed_matrix g = {0};
  OK(ctx, clembed_matrix_create(ctx, 4, 5, CLEMBED_F32, &g));
  clembed_backward_options bo = clembed_backward_defaults();
  bo.padding_idx = -9;
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_sgd_update(ctx, &g, &f.ids, 0.1f, &bo, &f.table, 0, NULL, NULL));
  expect_detail(ctx, CLEMBED_ERR_INVALID_ARGUMENT, "clembed_sgd_update", "padding_idx", -1, -9, "sgd padding -9");
  clembed_matrix_release(&g);
  /* no context: a failed creation leaves its detail in this thread */
  clembed_context *none = NULL;
  EXPECT(clembed_context_create("no device has this name 7f3e", &none) == CLEMBED_ERR_NO_DEVICE, "bad spec");
  expect_detail(NULL, CLEMBED_ERR_NO_DEVICE, "clembed_context_create", "device", -1, 0, "bad spec");
  EXPECT(clembed_finish(NULL) == CLEMBED_ERR_INVALID_ARGUMENT, "finish(NULL)");
  expect_detail(NULL, CLEMBED_ERR_INVALID_ARGUMENT, "clembed_finish", "ctx", -1, 0, "finish(NULL)");
  EXPECT(clembed_context_error(ctx, NULL) == CLEMBED_ERR_INVALID_ARGUMENT, "d NULL accepted");
  fixture_release(&f);
}

TU_CASE(detail_deferred) {
  int32_t ids[6] = {1, 2, 3, 42, 4, -77};
  fixture f;
  if (!fixture_make(ctx, &f, 8, 5, ids, 6)) return;
  /* a bad id: argument ids, index = token, value = id */
  OK(ctx, clembed_lookup(ctx, &f.table, &f.ids, &f.out, 0, NULL, NULL));
  FAILS(ctx, CLEMBED_ERR_INDEX_OUT_OF_RANGE, clembed_finish(ctx));
  expect_detail(ctx, CLEMBED_ERR_INDEX_OUT_OF_RANGE, "clembed_lookup", "ids", 3, 42, "bad id");
  /* with WRAP, -77 stays bad and 42 too: the first is token 3; the range is [-rows, rows) */
  clembed_embed_options o = clembed_embed_defaults();
  o.policy = CLEMBED_INDEX_WRAP;
  OK(ctx, clembed_embed(ctx, &f.table, &f.ids, &o, &f.out, 0, NULL, NULL));
  FAILS(ctx, CLEMBED_ERR_INDEX_OUT_OF_RANGE, clembed_finish(ctx));
  EXPECT(strstr(clembed_context_message(ctx), "[-8, 8)") != NULL, "WRAP message: %s", clembed_context_message(ctx));
  expect_detail(ctx, CLEMBED_ERR_INDEX_OUT_OF_RANGE, "clembed_embed", "ids", 3, 42, "WRAP bad id");
  /* CHECK keeps [0, rows) */
  OK(ctx, clembed_lookup(ctx, &f.table, &f.ids, &f.out, 0, NULL, NULL));
  FAILS(ctx, CLEMBED_ERR_INDEX_OUT_OF_RANGE, clembed_finish(ctx));
  EXPECT(strstr(clembed_context_message(ctx), "[0, 8)") != NULL, "CHECK message: %s", clembed_context_message(ctx));
  fixture_release(&f);

  /* positions: a learned table of 4 rows, sequences of 3 from offset 2 */
  int32_t good[6] = {1, 2, 3, 4, 5, 6};
  if (!fixture_make(ctx, &f, 8, 5, good, 6)) return;
  clembed_matrix pt = {0};
  OK(ctx, clembed_matrix_create(ctx, 4, 5, CLEMBED_F32, &pt));
  o = clembed_embed_defaults();
  o.positions = CLEMBED_POSITIONS_TABLE;
  o.position_table = &pt;
  o.seq_len = 3;
  o.position_offset = 2; /* tokens 0..2 at 2, 3, 4: token 2 is past the table */
  OK(ctx, clembed_embed(ctx, &f.table, &f.ids, &o, &f.out, 0, NULL, NULL));
  FAILS(ctx, CLEMBED_ERR_INDEX_OUT_OF_RANGE, clembed_finish(ctx));
  expect_detail(ctx, CLEMBED_ERR_INDEX_OUT_OF_RANGE, "clembed_embed", "position_table", 2, 4, "position past table");
  /* sequence_offsets: sequence 1 starts at -5 */
  int64_t offs[2] = {0, -5};
  clembed_ids so = {0};
  OK(ctx, clembed_ids_create(ctx, offs, 2, CLEMBED_I64, &so));
  o.position_offset = 0;
  o.sequence_offsets = &so;
  OK(ctx, clembed_embed(ctx, &f.table, &f.ids, &o, &f.out, 0, NULL, NULL));
  FAILS(ctx, CLEMBED_ERR_INDEX_OUT_OF_RANGE, clembed_finish(ctx));
  expect_detail(ctx, CLEMBED_ERR_INDEX_OUT_OF_RANGE, "clembed_embed", "sequence_offsets", 1, -5,
                "negative sequence start");
  /* the backward's position gradient */
  clembed_matrix g = {0}, gt = {0}, pg = {0};
  OK(ctx, clembed_matrix_create(ctx, 6, 5, CLEMBED_F32, &g));
  OK(ctx, clembed_matrix_create(ctx, 8, 5, CLEMBED_F32, &gt));
  OK(ctx, clembed_matrix_create(ctx, 4, 5, CLEMBED_F32, &pg));
  clembed_backward_options bo = clembed_backward_defaults();
  bo.seq_len = 3;
  bo.position_offset = 2;
  bo.position_grad = &pg;
  OK(ctx, clembed_backward(ctx, &g, &f.ids, &bo, &gt, 0, NULL, NULL));
  FAILS(ctx, CLEMBED_ERR_INDEX_OUT_OF_RANGE, clembed_finish(ctx));
  expect_detail(ctx, CLEMBED_ERR_INDEX_OUT_OF_RANGE, "clembed_backward", "position_grad", 2, 4, "backward position");
  clembed_matrix_release(&g);
  clembed_matrix_release(&gt);
  clembed_matrix_release(&pg);
  clembed_matrix_release(&pt);
  clembed_ids_release(&so);
  fixture_release(&f);
}

/* clembed_context_fail: a layered library's failure as the context's message
 * and detail; a deferred error already pending is still returned by finish */
TU_CASE(context_fail) {
  int32_t ids[2] = {1, 9};
  fixture f;
  if (!fixture_make(ctx, &f, 8, 5, ids, 2)) return;
  OK(ctx, clembed_lookup(ctx, &f.table, &f.ids, &f.out, 0, NULL, NULL)); /* id 9: a deferred error */
  clembed_status s = clembed_context_fail(ctx, CLEMBED_ERR_INVALID_ARGUMENT, "clembed_mpi_embed", "out", -1, 4,
                                          "clembed_mpi_embed: out has %d rows", 4);
  EXPECT(s == CLEMBED_ERR_INVALID_ARGUMENT, "returned %d", (int)s);
  EXPECT(!strcmp(clembed_context_message(ctx), "clembed_mpi_embed: out has 4 rows"), "message '%s'",
         clembed_context_message(ctx));
  expect_detail(ctx, CLEMBED_ERR_INVALID_ARGUMENT, "clembed_mpi_embed", "out", -1, 4, "recorded failure");
  FAILS(ctx, CLEMBED_ERR_INDEX_OUT_OF_RANGE, clembed_finish(ctx));
  expect_detail(ctx, CLEMBED_ERR_INDEX_OUT_OF_RANGE, "clembed_lookup", "ids", 1, 9, "the deferred error after it");
  fixture_release(&f);
}

TU_CASE(padding) {
  EXPECT(CLEMBED_NO_PADDING == INT64_MIN, "CLEMBED_NO_PADDING is %lld", (long long)CLEMBED_NO_PADDING);
  EXPECT(clembed_embed_defaults().padding_idx == INT64_MIN && clembed_backward_defaults().padding_idx == INT64_MIN,
         "defaults are not CLEMBED_NO_PADDING");
  int32_t ids[4] = {7, 6, 0, 7};
  fixture f;
  if (!fixture_make(ctx, &f, 8, 5, ids, 4)) return;
  const int64_t pads[] = {-1, -2, -8, CLEMBED_NO_PADDING};
  const int64_t rows[] = {7, 6, 0, -1};
  for (int k = 0; k < 4; k++) {
    clembed_embed_options o = clembed_embed_defaults();
    o.padding_idx = pads[k];
    OK(ctx, clembed_embed(ctx, &f.table, &f.ids, &o, &f.out, 0, NULL, NULL));
    float got[20];
    OK(ctx, clembed_matrix_read(ctx, &f.out, got, CLEMBED_F32));
    int bad = 0;
    for (int i = 0; i < 4; i++)
      for (int c = 0; c < 5; c++) {
        double want = ids[i] == rows[k] ? 0.0 : (double)ids[i] + c / 8.0;
        bad += (double)got[i * 5 + c] != want;
      }
    EXPECT(!bad, "padding_idx %lld: %d elements differ (row %lld must be zero)", (long long)pads[k], bad,
           (long long)rows[k]);
  }
  /* the backward: padding_idx -1 gets no gradient */
  clembed_matrix g = {0}, gt = {0};
  float ones[20];
  for (int i = 0; i < 20; i++) ones[i] = 1.0f;
  OK(ctx, clembed_matrix_create(ctx, 4, 5, CLEMBED_F32, &g));
  OK(ctx, clembed_matrix_write(ctx, &g, ones, CLEMBED_F32));
  OK(ctx, clembed_matrix_create(ctx, 8, 5, CLEMBED_F32, &gt));
  clembed_backward_options bo = clembed_backward_defaults();
  bo.padding_idx = -1;
  bo.accumulate = 0;
  OK(ctx, clembed_backward(ctx, &g, &f.ids, &bo, &gt, 0, NULL, NULL));
  float dw[40];
  OK(ctx, clembed_matrix_read(ctx, &gt, dw, CLEMBED_F32));
  EXPECT(dw[7 * 5] == 0.0f && dw[6 * 5] == 1.0f && dw[0] == 1.0f, "backward padding -1: rows 7, 6, 0 = %g %g %g",
         (double)dw[35], (double)dw[30], (double)dw[0]);
  clembed_matrix_release(&g);
  clembed_matrix_release(&gt);
  fixture_release(&f);
}

TU_CASE(failed_device_work) {
  int32_t ids[4] = {1, 2, 3, 4};
  fixture f;
  if (!fixture_make(ctx, &f, 8, 5, ids, 4)) return;
  float before[20], after[20];
  OK(ctx, clembed_matrix_read(ctx, &f.out, before, CLEMBED_F32)); /* zeros */
  cl_int err;
  cl_event gate = clCreateUserEvent(cl_context_of(ctx), &err);
  EXPECT(err == CL_SUCCESS, "clCreateUserEvent: %d", err);
  if (err != CL_SUCCESS) return;
  OK(ctx, clembed_lookup(ctx, &f.table, &f.ids, &f.out, 1, &gate, NULL));
  clSetUserEventStatus(gate, -5); /* the caller's step failed */
  clembed_status s = clembed_finish(ctx);
  EXPECT(s != CLEMBED_OK && (int)s < 0 && (int)s > -1000, "finish after a failed wait list: %s (%d)",
         clembed_status_string(s), (int)s);
  clembed_error_detail d;
  clembed_context_error(ctx, &d);
  EXPECT(d.status == s && !strcmp(d.operation, "clembed_lookup"), "detail: %s in '%s'",
         clembed_status_string(d.status), d.operation);
  EXPECT(clembed_finish(ctx) == CLEMBED_OK, "a second finish still fails: %s", clembed_context_message(ctx));
  clReleaseEvent(gate);

  /* a blocking read after a failed operation reports it instead of old data */
  gate = clCreateUserEvent(cl_context_of(ctx), &err);
  OK(ctx, clembed_lookup(ctx, &f.table, &f.ids, &f.out, 1, &gate, NULL));
  clSetUserEventStatus(gate, -5);
  memset(after, 0, sizeof after);
  s = clembed_matrix_read(ctx, &f.out, after, CLEMBED_F32);
  EXPECT(s != CLEMBED_OK, "matrix_read after a failed lookup returned CLEMBED_OK (%s)",
         !memcmp(before, after, sizeof after) ? "with the old contents" : "with new contents");
  EXPECT(clembed_finish(ctx) == CLEMBED_OK, "finish after the reported failure: %s", clembed_context_message(ctx));
  clReleaseEvent(gate);

  /* the caller's event of a failed operation fails too, and the next call works */
  gate = clCreateUserEvent(cl_context_of(ctx), &err);
  cl_event done = NULL;
  OK(ctx, clembed_lookup(ctx, &f.table, &f.ids, &f.out, 1, &gate, &done));
  clSetUserEventStatus(gate, -5);
  s = clembed_finish(ctx);
  EXPECT(s != CLEMBED_OK, "finish with the caller's event: %s", clembed_status_string(s));
  if (done) clReleaseEvent(done);
  clReleaseEvent(gate);
  OK(ctx, clembed_lookup(ctx, &f.table, &f.ids, &f.out, 0, NULL, NULL));
  OK(ctx, clembed_matrix_read(ctx, &f.out, after, CLEMBED_F32));
  EXPECT(after[0] == 1.0f && after[19] == 4.5f, "lookup after recovery: %g %g", (double)after[0], (double)after[19]);
  fixture_release(&f);
}

TU_CASE(foreign_objects) {
  int32_t ids[4] = {1, 2, 3, 4};
  fixture f;
  if (!fixture_make(ctx, &f, 8, 5, ids, 4)) return;
  cl_device_id dev = cl_device_of(ctx);
  cl_int err;
  cl_context other = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
  EXPECT(err == CL_SUCCESS, "clCreateContext: %d", err);
  if (err != CL_SUCCESS) return;
  cl_mem b = clCreateBuffer(other, CL_MEM_READ_WRITE, 8 * 5 * 4, NULL, &err);
  cl_event e = clCreateUserEvent(other, &err);
  clSetUserEventStatus(e, CL_COMPLETE);
  clembed_matrix t = f.table;
  t.buffer = b;
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_lookup(ctx, &t, &f.ids, &f.out, 0, NULL, NULL));
  expect_detail(ctx, CLEMBED_ERR_INVALID_ARGUMENT, "clembed_lookup", "table", -1, 0, "table of another context");
  EXPECT(strstr(clembed_context_message(ctx), "cl_context") != NULL, "message: %s", clembed_context_message(ctx));
  clembed_ids i2 = f.ids;
  i2.buffer = b;
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_lookup(ctx, &f.table, &i2, &f.out, 0, NULL, NULL));
  expect_detail(ctx, CLEMBED_ERR_INVALID_ARGUMENT, "clembed_lookup", "ids", -1, 0, "ids of another context");
  float host[40];
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_matrix_read(ctx, &t, host, CLEMBED_F32));
  expect_detail(ctx, CLEMBED_ERR_INVALID_ARGUMENT, "clembed_matrix_read", "m", -1, 0, "read of another context");
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_matrix_init_uniform(ctx, &t, 0.0f, 1.0f, 1, 0, NULL, NULL));
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_lookup(ctx, &f.table, &f.ids, &f.out, 1, &e, NULL));
  expect_detail(ctx, CLEMBED_ERR_INVALID_ARGUMENT, "clembed_lookup", "event_wait_list", 0, 0,
                "event of another context");
  FAILS(ctx, CLEMBED_ERR_INVALID_ARGUMENT, clembed_positional(ctx, NULL, 0, &f.out, 1, &e, NULL));
  OK(ctx, clembed_finish(ctx));
  clReleaseEvent(e);
  clReleaseMemObject(b);
  clReleaseContext(other);
  fixture_release(&f);
}

TU_CASE(gated_queue) {
  if (!tu_user_events_gate(cl_device_of(ctx))) {
    tu_skip("a user event that a command waits on hangs on this device when set (pocl/pocl#1177)");
    return;
  }
  cl_device_id dev = cl_device_of(ctx);
  cl_int err;
  cl_context c = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
  cl_command_queue q = clCreateCommandQueue(c, dev, 0, &err);
  EXPECT(err == CL_SUCCESS, "queue: %d", err);
  if (err != CL_SUCCESS) return;
  cl_event gate = clCreateUserEvent(c, &err);
  /* the caller's work, held back by the gate */
  cl_event held = NULL;
  err = clEnqueueMarkerWithWaitList(q, 1, &gate, &held);
  EXPECT(err == CL_SUCCESS, "marker: %d", err);
  clembed_context *joined = NULL;
  clembed_status s = clembed_context_create_from_queue(q, &joined); /* must not wait for the gate */
  EXPECT(s == CLEMBED_OK, "create_from_queue on a gated queue: %s: %s", clembed_status_string(s),
         clembed_last_error_message());
  cl_int st = 0;
  clGetEventInfo(held, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL);
  EXPECT(st > CL_COMPLETE, "the caller's held command completed (%d) before its gate", st);
  clembed_context_destroy(joined); /* must not finish the caller's queue */
  clSetUserEventStatus(gate, CL_COMPLETE);
  clFinish(q);
  /* Mesa's rusticl (22.3) returns from clFinish with the held marker's status
     still CL_QUEUED: wait for the event itself */
  clWaitForEvents(1, &held);
  clGetEventInfo(held, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL);
  EXPECT(st == CL_COMPLETE, "held command after the gate: %d", st);
  /* and a joined context works once the gate opens */
  s = clembed_context_create_from_queue(q, &joined);
  EXPECT(s == CLEMBED_OK, "create_from_queue: %s", clembed_status_string(s));
  if (joined) {
    int32_t ids[2] = {3, 0};
    fixture f;
    if (fixture_make(joined, &f, 4, 3, ids, 2)) {
      float got[6];
      OK(joined, clembed_lookup(joined, &f.table, &f.ids, &f.out, 0, NULL, NULL));
      OK(joined, clembed_matrix_read(joined, &f.out, got, CLEMBED_F32));
      EXPECT(got[0] == 3.0f && got[3] == 0.0f, "joined lookup %g %g", (double)got[0], (double)got[3]);
      fixture_release(&f);
    }
    clembed_context_destroy(joined);
  }
  clReleaseEvent(held);
  clReleaseEvent(gate);
  clReleaseCommandQueue(q);
  clReleaseContext(c);
}

/* Creating a matrix on a joined queue held back by a user event returns at
 * once (its zero fill is enqueued behind the caller's work); once the gate
 * opens the matrix reads as zeros. Also on an out-of-order queue, where the
 * fill must still come before a later read. */
static void gated_create(clembed_context *ctx, cl_command_queue_properties props, const char *what) {
  cl_device_id dev = cl_device_of(ctx);
  cl_int err;
  cl_context c = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
  cl_command_queue q = clCreateCommandQueue(c, dev, props, &err);
  if (props && err == CL_INVALID_QUEUE_PROPERTIES) { /* the device has no out-of-order queues */
    printf("%s: not supported by the device\n", what);
    clReleaseContext(c);
    return;
  }
  EXPECT(err == CL_SUCCESS, "%s: queue: %d", what, err);
  if (err != CL_SUCCESS) return;
  cl_event gate = clCreateUserEvent(c, &err), held = NULL;
  err = clEnqueueMarkerWithWaitList(q, 1, &gate, &held);
  EXPECT(err == CL_SUCCESS, "%s: marker: %d", what, err);
  clembed_context *joined = NULL;
  OK(NULL, clembed_context_create_from_queue(q, &joined));
  clembed_matrix m = {0}, m2 = {0};
  enum { R = 37, C = 29 };
  if (joined) {
    /* must return while the gate is closed (a wait would deadlock: the alarm fails it) */
    OK(joined, clembed_matrix_create(joined, R, C, CLEMBED_F32, &m));
    OK(joined, clembed_matrix_create(joined, 1, 12, CLEMBED_F16, &m2));
    cl_int st = 0;
    clGetEventInfo(held, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL);
    EXPECT(st > CL_COMPLETE, "%s: the caller's held command completed (%d) before its gate", what, st);
  }
  clSetUserEventStatus(gate, CL_COMPLETE);
  if (joined) {
    float *got = malloc(R * C * sizeof *got), h[12];
    for (size_t i = 0; i < R * C; i++) got[i] = 777.0f;
    for (size_t i = 0; i < 12; i++) h[i] = 777.0f;
    OK(joined, clembed_matrix_read(joined, &m, got, CLEMBED_F32));
    OK(joined, clembed_matrix_read(joined, &m2, h, CLEMBED_F32));
    size_t nonzero = 0;
    for (size_t i = 0; i < R * C; i++) nonzero += got[i] != 0.0f;
    for (size_t i = 0; i < 12; i++) nonzero += h[i] != 0.0f;
    EXPECT(nonzero == 0, "%s: %zu elements of the created matrices are not zero", what, nonzero);
    OK(joined, clembed_finish(joined));
    free(got);
  }
  clembed_matrix_release(&m);
  clembed_matrix_release(&m2);
  clembed_context_destroy(joined);
  clWaitForEvents(1, &held);
  clReleaseEvent(held);
  clReleaseEvent(gate);
  clReleaseCommandQueue(q);
  clReleaseContext(c);
}

TU_CASE(gated_create) {
  if (!tu_user_events_gate(cl_device_of(ctx))) {
    tu_skip("a user event that a command waits on hangs on this device when set (pocl/pocl#1177)");
    return;
  }
  gated_create(ctx, 0, "in-order queue");
  gated_create(ctx, CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE, "out-of-order queue");
}

int main(int argc, char **argv) {
  return tu_main(argc, argv, (tu_suite){.name = "test_api", .device = 1, .case_timeout_s = 120});
}
