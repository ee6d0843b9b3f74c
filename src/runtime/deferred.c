/* Deferred errors: the device-side error records (slots) of checked
 * operations, the error-recording kernel, the commands a finish checks, and
 * clembed_finish. */
#include "runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------- tracked commands */

/* Records a failed command's status in ctx->failed (the first one wins). */
static void tracked_note(clembed_context *ctx, const ce_tracked *t, cl_int st) {
  if (st >= 0 || ctx->failed.status != CLEMBED_OK) return;
  clembed_status code = st > -1000 ? (clembed_status)st : (clembed_status)CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST;
  ce_detail_fill(&ctx->failed, code, t->op, st == CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST ? "event_wait_list" : "",
              -1, (int64_t)st);
}

static cl_int event_status(cl_event e) {
  cl_int st = CL_COMPLETE;
  if (clGetEventInfo(e, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL) != CL_SUCCESS) st = CL_COMPLETE;
  return st;
}

/* Drops the commands that have completed (noting failures); with `wait`, waits
 * for every one first. */
static void tracked_sweep(clembed_context *ctx, int wait) {
  size_t keep = 0;
  for (size_t i = 0; i < ctx->ntracked; i++) {
    ce_tracked *t = &ctx->tracked[i];
    cl_int st = event_status(t->event);
    if (wait && st > CL_COMPLETE) { /* (a wait on a failed event is itself an error on some implementations) */
      clWaitForEvents(1, &t->event);
      st = event_status(t->event);
    }
    if (st > CL_COMPLETE) { /* still queued or running */
      ctx->tracked[keep++] = *t;
      continue;
    }
    tracked_note(ctx, t, st);
    clReleaseEvent(t->event);
  }
  ctx->ntracked = keep;
}

void ce_tracked_wait_release(clembed_context *ctx) {
  tracked_sweep(ctx, 1);
  for (size_t i = 0; i < ctx->ntracked; i++) clReleaseEvent(ctx->tracked[i].event);
  ctx->ntracked = 0;
}

/* Keeps `ev` (a reference the context owns) for the next finish. */
static clembed_status track(clembed_context *ctx, cl_event ev, const char *op) {
  if (ctx->ntracked == ctx->tracked_cap) tracked_sweep(ctx, 0);
  if (ctx->ntracked == ctx->tracked_cap) {
    size_t cap = ctx->tracked_cap ? 2 * ctx->tracked_cap : 64;
    ce_tracked *t = realloc(ctx->tracked, cap * sizeof *t);
    if (!t) { /* cannot keep it: wait for it now */
      clWaitForEvents(1, &ev);
      ce_tracked one = {ev, op};
      tracked_note(ctx, &one, event_status(ev));
      clReleaseEvent(ev);
      return CLEMBED_OK;
    }
    ctx->tracked = t;
    ctx->tracked_cap = cap;
  }
  ctx->tracked[ctx->ntracked].event = ev;
  ctx->tracked[ctx->ntracked++].op = op;
  return CLEMBED_OK;
}

clembed_status ce_track_end(clembed_context *ctx, clembed_status status, cl_event *event, const cl_event *ownp) {
  cl_event own = *ownp;
  if (status != CLEMBED_OK) {
    if (own) clReleaseEvent(own);
    return status;
  }
  if (event && *event) {
    clRetainEvent(*event);
    track(ctx, *event, ctx->op);
  } else if (own) {
    track(ctx, own, ctx->op);
  }
  return status;
}

/* After a clFinish: the first failed command since the last check, as a
 * status with its message and detail (and forgotten). */
static clembed_status tracked_collect(clembed_context *ctx) {
  tracked_sweep(ctx, 1);
  clembed_error_detail f = ctx->failed;
  if (f.status == CLEMBED_OK) return CLEMBED_OK;
  memset(&ctx->failed, 0, sizeof ctx->failed);
  ce_set_message(ctx, "%s: a command on the device failed with %s (%lld)%s", f.operation,
                 clembed_status_string((clembed_status)f.value), (long long)f.value,
                 f.value == CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST
                     ? ": an event in its wait list failed; its output was not written"
                     : "; its output was not written");
  ctx->detail = f;
  return f.status;
}

/* ------------------------------------------------------- deferred errors */

void ce_slot_remap(ce_slot_info *info, const clembed_ids *remap, clembed_index_policy policy, size_t table_rows) {
  if (!remap) return;
  info->remap = 1;
  info->policy = (int)policy;
  info->table_rows = table_rows;
  info->id_rows = remap->count;
}

/* Records the first error among `used` slots read from the device in
 * ctx->deferred (if none is pending). */
static void slots_scan(clembed_context *ctx, const cl_uint *s, const ce_slot_info *info, size_t used) {
  for (size_t k = 0; k < used && ctx->deferred == CLEMBED_OK; k++) {
    const cl_uint *w = s + k * CE_SLOT_UINTS;
    const ce_slot_info *in = &info[k];
    /* r: [0] bad-id token, [1] bad-position token, [2,3] id, [4,5] sequence start, [6] a bag too long
     * for the loop limit, [7,8] its length */
    cl_uint r[9] = {w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7], 0};
    if (ctx->atom64) {
      uint64_t q[6];
      memcpy(q, w, sizeof q);
      r[0] = (cl_uint)(q[0] >> 32);
      r[1] = (cl_uint)(q[2] >> 32);
      r[2] = (cl_uint)q[0];
      r[3] = (cl_uint)q[1];
      r[4] = (cl_uint)q[2];
      r[5] = (cl_uint)q[3];
      r[6] = (cl_uint)(q[4] >> 32);
      r[7] = (cl_uint)q[4];
      r[8] = (cl_uint)q[5];
    }
    if (r[0] == 0xFFFFFFFFu && r[1] == 0xFFFFFFFFu && r[6] == 0xFFFFFFFFu) continue;
    ctx->deferred = CLEMBED_ERR_INDEX_OUT_OF_RANGE;
    char part[48] = ""; /* a batched call's feature */
    if (in->has_feature) snprintf(part, sizeof part, "features[%llu].", (unsigned long long)in->feature);
    if (r[0] == 0xFFFFFFFFu && r[1] == 0xFFFFFFFFu) { /* a bag too long (bad ids and offsets come first) */
      uint64_t len = (uint64_t)r[7] | ((uint64_t)r[8] << 32);
      ctx->deferred = CLEMBED_ERR_UNSUPPORTED;
      snprintf(ctx->deferred_message, sizeof ctx->deferred_message,
               "%s: %sbag %u has %llu ids: this device ends a work-item's loops after %zu iterations (the "
               "tuning's loop_limit), which pooling so many ids (rows of %llu columns) in this call can pass, so "
               "the bag was not pooled (its output row is zero, its ids unchecked): at most %llu ids a bag in "
               "this call here",
               in->op, part, r[6], (unsigned long long)len, ctx->tune->loop_limit,
               (unsigned long long)in->bag_cols, (unsigned long long)in->bag_cap);
      ce_detail_fill(&ctx->deferred_detail, CLEMBED_ERR_UNSUPPORTED, in->op, "offsets", (int64_t)r[6],
                     (int64_t)len);
    } else if (r[0] <= r[1]) {
      int64_t v = (int64_t)((uint64_t)r[2] | ((uint64_t)r[3] << 32));
      unsigned long long rows = (unsigned long long)in->id_rows;
      const char *idn = in->id_arg ? in->id_arg : "ids";
      /* with a remap, an id of [0, rows) under the policy was reported for its remap entry */
      int64_t e = in->wrap && v < 0 && v >= -(int64_t)rows ? v + (int64_t)rows : v;
      if (in->remap && in->policy == CLEMBED_INDEX_CLAMP && rows) e = e < 0 ? 0 : e >= (int64_t)rows ? (int64_t)rows - 1 : e;
      if (in->remap && e >= 0 && (uint64_t)e < rows) {
        snprintf(ctx->deferred_message, sizeof ctx->deferred_message,
                 "%s: %s%s[%u] = %lld: remap[%lld] is neither -1 (pruned) nor one of the table's %llu rows", in->op, part,
                 idn, r[0], (long long)v, (long long)e, (unsigned long long)in->table_rows);
        ce_detail_fill(&ctx->deferred_detail, CLEMBED_ERR_INDEX_OUT_OF_RANGE, in->op, "remap", e, v);
      } else {
        if (in->wrap)
          snprintf(ctx->deferred_message, sizeof ctx->deferred_message,
                   "%s: %s%s[%u] = %lld is outside [-%llu, %llu)%s", in->op, part, idn, r[0], (long long)v, rows, rows,
                   in->remap ? " (remap_rows)" : "");
        else
          snprintf(ctx->deferred_message, sizeof ctx->deferred_message, "%s: %s%s[%u] = %lld is outside [0, %llu)%s",
                   in->op, part, idn, r[0], (long long)v, rows, in->remap ? " (remap_rows)" : "");
        ce_detail_fill(&ctx->deferred_detail, CLEMBED_ERR_INDEX_OUT_OF_RANGE, in->op, idn, (int64_t)r[0], v);
      }
    } else if (in->bag_offsets) {
      int64_t v = (int64_t)((uint64_t)r[4] | ((uint64_t)r[5] << 32));
      snprintf(ctx->deferred_message, sizeof ctx->deferred_message,
               "%s: %soffsets[%u] = %lld: offsets must start at 0, never decrease and end at the number of ids "
               "(%llu)",
               in->op, part, r[1], (long long)v, (unsigned long long)in->pos_rows);
      ce_detail_fill(&ctx->deferred_detail, CLEMBED_ERR_INDEX_OUT_OF_RANGE, in->op, "offsets", (int64_t)r[1], v);
    } else {
      uint64_t i = r[1];
      uint64_t first = in->position_offset;
      uint64_t inseq = in->seq_len ? i % in->seq_len : i;
      if (in->has_sequence_offsets) first = (uint64_t)r[4] | ((uint64_t)r[5] << 32);
      if ((int64_t)first < 0 && in->has_sequence_offsets) {
        uint64_t b = in->seq_len ? i / in->seq_len : 0;
        snprintf(ctx->deferred_message, sizeof ctx->deferred_message,
                 "%s: token %llu is at position %lld: sequence_offsets gives its sequence a negative start",
                 in->op, (unsigned long long)i, (long long)(first + inseq));
        ce_detail_fill(&ctx->deferred_detail, CLEMBED_ERR_INDEX_OUT_OF_RANGE, in->op, "sequence_offsets", (int64_t)b,
                    (int64_t)first);
      } else if ((int64_t)first < 0) {
        snprintf(ctx->deferred_message, sizeof ctx->deferred_message,
                 "%s: token %llu is at position %llu: position_offset %llu is beyond 2^63 - 1", in->op,
                 (unsigned long long)i, (unsigned long long)(first + inseq), (unsigned long long)first);
        ce_detail_fill(&ctx->deferred_detail, CLEMBED_ERR_INDEX_OUT_OF_RANGE, in->op, "positions", (int64_t)i,
                    (int64_t)(first + inseq));
      } else if (in->sinusoid) {
        /* a sequence start from sequence_offsets that takes the sinusoid to 2^32 or past */
        uint64_t b = in->seq_len ? i / in->seq_len : 0;
        snprintf(ctx->deferred_message, sizeof ctx->deferred_message,
                 "%s: token %llu is at position %llu (sequence_offsets[%llu] = %llu): the sinusoid takes positions "
                 "below 2^32",
                 in->op, (unsigned long long)i, (unsigned long long)(first + inseq), (unsigned long long)b,
                 (unsigned long long)first);
        ce_detail_fill(&ctx->deferred_detail, CLEMBED_ERR_INDEX_OUT_OF_RANGE, in->op, "sequence_offsets", (int64_t)b,
                       (int64_t)first);
      } else {
        snprintf(ctx->deferred_message, sizeof ctx->deferred_message,
                 "%s: token %llu is at position %llu, outside the position table [0, %llu)", in->op,
                 (unsigned long long)i, (unsigned long long)(first + inseq), (unsigned long long)in->pos_rows);
        ce_detail_fill(&ctx->deferred_detail, CLEMBED_ERR_INDEX_OUT_OF_RANGE, in->op,
                    in->pos_arg ? in->pos_arg : "positions", (int64_t)i, (int64_t)(first + inseq));
      }
    }
  }
}

/* Enqueues, without waiting, a read of the used slots into `host` and their
 * reset (on an out-of-order queue fenced by barriers on both sides, so that no
 * later kernel reports into a slot before it is reset). */
static cl_int slots_read_and_reset(clembed_context *ctx, size_t used, cl_uint *host, int reset) {
  size_t bytes = used * CE_SLOT_UINTS * sizeof(cl_uint);
  cl_int err = CL_SUCCESS;
  cl_event last = NULL, ev = NULL;
  if (!ctx->in_order) err = clEnqueueBarrierWithWaitList(ctx->queue, 0, NULL, NULL);
  if (err == CL_SUCCESS && host) err = clEnqueueReadBuffer(ctx->queue, ctx->errbuf, CL_FALSE, 0, bytes, host, 0, NULL, &last);
  if (err == CL_SUCCESS && reset) {
    err = clEnqueueWriteBuffer(ctx->queue, ctx->errbuf, CL_FALSE, 0, bytes, ctx->clean_slots, 0, NULL, &ev);
    if (err == CL_SUCCESS && last) clReleaseEvent(last);
    if (err == CL_SUCCESS) last = ev;
  }
  if (err == CL_SUCCESS && reset && !ctx->in_order) err = clEnqueueBarrierWithWaitList(ctx->queue, 0, NULL, NULL);
  /* they read from and write into the context's memory: destroy waits for them */
  if (last && err == CL_SUCCESS) track(ctx, last, "clembed_finish");
  else if (last) clReleaseEvent(last);
  return err;
}

void ce_slot_batches_free(clembed_context *ctx) {
  for (ce_slot_batch *b = ctx->batches, *n; b; b = n) {
    n = b->next;
    free(b);
  }
  ctx->batches = NULL;
  ctx->batches_tail = NULL;
}

/* Waits for the work enqueued so far (one clFinish, after a read of the used
 * slots), records the first error of the batches put aside and of the slots in
 * ctx->deferred (if none is pending), and resets the slots if any changed. */
static clembed_status slots_drain(clembed_context *ctx) {
  size_t used = ctx->slots_used;
  cl_int err = used ? slots_read_and_reset(ctx, used, ctx->slot_host, 0) : CL_SUCCESS;
  if (err == CL_SUCCESS) err = clFinish(ctx->queue);
  if (err != CL_SUCCESS) return ce_cl_fail(ctx, err, "waiting for the context's work");
  for (ce_slot_batch *b = ctx->batches; b; b = b->next) slots_scan(ctx, b->host, b->info, b->used);
  ce_slot_batches_free(ctx);
  if (!used) return CLEMBED_OK;
  ctx->slots_used = 0;
  slots_scan(ctx, ctx->slot_host, ctx->slot_info, used);
  /* a slot changes only when its operation found an error: reset only then */
  if (memcmp(ctx->slot_host, ctx->clean_slots, used * CE_SLOT_UINTS * sizeof(cl_uint)) != 0 &&
      (err = slots_read_and_reset(ctx, used, NULL, 1)) != CL_SUCCESS)
    return ce_cl_fail(ctx, err, "resetting the error record");
  return CLEMBED_OK;
}

/* When every slot is taken: puts the slots' contents aside (a non-blocking
 * read into a batch the next drain scans first) and resets them, without
 * waiting, so an enqueue never blocks. */
static clembed_status slots_set_aside(clembed_context *ctx) {
  size_t used = ctx->slots_used;
  ce_slot_batch *b = malloc(sizeof *b);
  if (!b) return ce_fail(ctx, CLEMBED_ERR_OUT_OF_MEMORY, "error record: out of host memory");
  b->next = NULL;
  b->used = used;
  memcpy(b->info, ctx->slot_info, used * sizeof b->info[0]);
  cl_int err = slots_read_and_reset(ctx, used, b->host, 1);
  if (err != CL_SUCCESS) {
    clFinish(ctx->queue); /* a read into b may be pending */
    free(b);
    return ce_cl_fail(ctx, err, "setting the error record aside");
  }
  if (ctx->batches_tail) ctx->batches_tail->next = b;
  else ctx->batches = b;
  ctx->batches_tail = b;
  ctx->slots_used = 0;
  return CLEMBED_OK;
}

clembed_status ce_slot_room(clembed_context *ctx, size_t k) {
  if (k > CE_SLOTS) k = CE_SLOTS;
  return ctx->slots_used && ctx->slots_used + k > CE_SLOTS ? slots_set_aside(ctx) : CLEMBED_OK;
}

clembed_status ce_slot_reserve(clembed_context *ctx, const ce_slot_info *info, cl_uint *slot) {
  if (ctx->slots_used == CE_SLOTS) {
    clembed_status s = slots_set_aside(ctx);
    if (s != CLEMBED_OK) return s;
  }
  *slot = (cl_uint)ctx->slots_used;
  ctx->slot_info[ctx->slots_used++] = *info;
  return CLEMBED_OK;
}

clembed_status ce_collect(clembed_context *ctx) {
  clembed_status s = slots_drain(ctx);
  if (s != CLEMBED_OK) return s;
  s = tracked_collect(ctx);
  if (s != CLEMBED_OK) return s;
  s = ctx->deferred;
  if (s != CLEMBED_OK) {
    ce_set_message(ctx, "%s", ctx->deferred_message);
    ctx->detail = ctx->deferred_detail;
    ctx->deferred = CLEMBED_OK;
    ctx->deferred_message[0] = '\0';
  }
  return s;
}


clembed_status clembed_finish(clembed_context *ctx) {
  CE_ENTER(ctx, "clembed_finish");
  return ce_collect(ctx);
}

cl_int ce_after_earlier_work(clembed_context *ctx) {
  return ctx->in_order ? CL_SUCCESS : clEnqueueBarrierWithWaitList(ctx->queue, 0, NULL, NULL);
}

/* ------------------------------------------------------ the record kernel */

clembed_status ce_chain_close_checked(ce_chain *ch, const ce_record *rec, cl_event *event) {
  clembed_status status = ce_chain_record(ch, rec);
  return status != CLEMBED_OK ? status : ce_chain_close(ch, event);
}

clembed_status ce_chain_record(ce_chain *ch, const ce_record *rec) {
  clembed_status status = CLEMBED_OK;
  clembed_context *ctx = ch->ctx;
  if (rec->slot == CE_NO_SLOT || ctx->atom64) return CLEMBED_OK;
  cl_kernel r;
  CHECK(ce_kernel(ctx, rec->family, rec->options, "ce_record_error", &r));
  const clembed_ids *ids = rec->ids, *so = rec->sequence_offsets;
  cl_mem none = NULL;
  cl_mem idb = ids->buffer, sob = so ? so->buffer : none;
  cl_ulong id_off = ids->offset, so_off = so ? so->offset : 0, sl = rec->seq_len;
  cl_int id64 = ids->type == CLEMBED_I64, so64 = so && so->type == CLEMBED_I64, has_so = so != NULL;
  cl_uint slot = rec->slot;
  CHECK(ce_set_args(ctx, r, "ce_record_error", CE_ARG(ctx->errbuf), CE_ARG(slot), CE_ARG(idb), CE_ARG(idb),
                    CE_ARG(id_off), CE_ARG(id64), CE_ARG(sob), CE_ARG(sob), CE_ARG(so_off), CE_ARG(so64),
                    CE_ARG(has_so), CE_ARG(sl), CE_END));
  CHECK(ce_chain_1d(ch, r, "ce_record_error", 1, 1));
cleanup:
  return status;
}
