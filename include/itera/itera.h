/* itera C API (issue 5): profile your own application with itera, from C or any language with a C
 * foreign-function interface. A thin layer over the C++ API (include/itera/user/), in libitera.so.
 * docs/user-api.md has the whole story; in short:
 *
 *   itera_session_options o;  itera_session_options_init(&o);
 *   o.name = "my-pipeline";  o.results_path = "run.jsonl";
 *   itera_session* s;  if (itera_session_open(&o, &s) != ITERA_OK) puts(itera_last_error());
 *   itera_scope* step;    itera_iteration_create(s, stream, &step);
 *   itera_scope* decode;  itera_scope_create(s, "decode", stream, &decode);
 *   for (...) { itera_scope_enter(step); itera_scope_enter(decode); ...; itera_scope_exit(decode);
 *               itera_count(s, ITERA_COUNT_OUTPUT_TOKENS, 32); itera_scope_exit(step); }
 *   itera_scope_destroy(decode); itera_scope_destroy(step);
 *   itera_session_close(s);          then: itera report run.jsonl
 *
 * ABI: functions only take and return plain C types, opaque handles and the option structs below,
 * whose first member is their size (set by the *_init functions) so that later versions can add
 * members at the end. Every function returning itera_status returns ITERA_OK (0) on success;
 * otherwise itera_last_error() holds a message naming what was wrong and how to fix it, for the
 * calling thread, until its next failing call. No function writes to stdout or stderr.
 *
 * Privacy (R18): only the labels, numbers and stream handles passed here are recorded; nothing
 * reads tensors, prompts, images, file names or the command line. */
#ifndef ITERA_ITERA_H
#define ITERA_ITERA_H

#include <stddef.h>
#include <stdint.h>

#if defined(ITERA_BUILDING_LIBRARY)
#define ITERA_API __attribute__((visibility("default")))
#else
#define ITERA_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The C ABI's version: the library's soname is libitera.so.<ITERA_C_ABI_VERSION>. */
#define ITERA_C_ABI_VERSION 1

typedef enum itera_status {
  ITERA_OK = 0,
  ITERA_ERROR_USAGE = 1,    /* a bad argument or call order (unknown counter, existing results file, ...) */
  ITERA_ERROR_STAGE = 2,    /* a scope exited twice, out of order, on another thread, or never exited */
  ITERA_ERROR_DEVICE = 3,   /* a CUDA call failed, or a stream belongs to another device than the session's */
  ITERA_ERROR_IO = 4,       /* the results file could not be written; the lines before stay */
  ITERA_ERROR_CALLBACK = 5, /* runner: a callback failed; its case was written as failed and the run went on */
  ITERA_ERROR_INTERNAL = 6  /* anything else (out of memory, a bug): the message says what */
} itera_status;

/* session options: device */
#define ITERA_DEVICE_AUTO (-2) /* CUDA device 0 when usable, else host time only (the default) */
#define ITERA_DEVICE_NONE (-1) /* host time only */

typedef enum itera_counter {
  ITERA_COUNT_BYTES_READ = 0, /* also added to the innermost open stage */
  ITERA_COUNT_BYTES_WRITTEN = 1,
  ITERA_COUNT_FLOPS = 2,
  ITERA_COUNT_ITEMS = 3,
  ITERA_COUNT_TOKENS = 4,
  ITERA_COUNT_OUTPUT_TOKENS = 5, /* generated tokens: `itera cost` prices these */
  ITERA_COUNT_IMAGES = 6,        /* itera cost: per thousand images */
  ITERA_COUNT_STEPS = 7          /* training steps; itera cost: per step */
} itera_counter;

typedef struct itera_session itera_session;
typedef struct itera_scope itera_scope;
typedef struct itera_call itera_call;

/* ---- library ---- */
ITERA_API int itera_abi_version(void);          /* ITERA_C_ABI_VERSION of the loaded library */
ITERA_API const char* itera_version(void);      /* "0.1.0" */
ITERA_API const char* itera_last_error(void);   /* "" when this thread had no failure yet */
ITERA_API const char* itera_status_name(itera_status status); /* "ITERA_ERROR_STAGE" */

/* ---- session ---- */
typedef struct itera_session_options {
  size_t struct_size;        /* sizeof(itera_session_options), set by itera_session_options_init */
  const char* name;          /* workload name in the results (required) */
  const char* results_path;  /* JSON lines file, refused when it exists; "-": stdout; NULL or "": in memory only */
  int32_t device;            /* CUDA device index of the streams given, ITERA_DEVICE_AUTO or ITERA_DEVICE_NONE */
  int32_t version;           /* workload_version, 1 by default */
  const char* label;         /* recorded as the context's command; NULL: none */
  const char* device_clock;  /* "auto" (NULL), "cupti" or "events": how scopes given a stream take device time */
} itera_session_options;

ITERA_API void itera_session_options_init(itera_session_options* options);
/* Writes the results file's context line. */
ITERA_API itera_status itera_session_open(const itera_session_options* options, itera_session** out);
/* A recipe field of every case ended from now on (model, precision.weights, ...). */
ITERA_API itera_status itera_session_set_field(itera_session* session, const char* key, const char* value);
/* Ends the open case, closes the file and frees the session (also when it returns an error, which
 * then is the ending case's: a scope never exited, a failed write). NULL is accepted. */
ITERA_API itera_status itera_session_close(itera_session* session);
/* "cuda" or "cpu" (host time only); the CUDA device index or -1. */
ITERA_API const char* itera_session_backend(const itera_session* session);
ITERA_API int itera_session_device(const itera_session* session);

/* ---- cases ---- */
/* Begins a case with `count` axes (names[i] = values[i]); the first `warmup_iterations` iterations
 * are warm-up. Without it, the first scope, count or mark begins a case with no axes. */
ITERA_API itera_status itera_case_begin(itera_session* session, const char* const* names, const char* const* values,
                                        size_t count, uint32_t warmup_iterations);
ITERA_API itera_status itera_case_set_field(itera_session* session, const char* key, const char* value);
/* Writes the case. A scope still open fails the case (written, with the reason): ITERA_ERROR_STAGE. */
ITERA_API itera_status itera_case_end(itera_session* session);
/* Ends the open case as failed on purpose and writes it: status "failed", `reason` as its message
 * (your own text, e.g. what went wrong; put no data in it), what it measured kept (samples, stages,
 * counts, marks) but no statistics or rates. A scope still open is closed and named after the reason;
 * that is not an error here (ITERA_OK: the case is failed already). ITERA_ERROR_USAGE, with the case
 * left open, for a NULL or empty reason; ITERA_ERROR_USAGE when no case is open.
 * Added to ABI 1 after its first release, as was itera_session_case_open: a program calling them
 * needs a libitera.so.1 that exports them (nm -D). */
ITERA_API itera_status itera_session_fail_case(itera_session* session, const char* reason);
/* 1 when a case is open now (begun by itera_case_begin, or by a scope, count or mark), else 0 (also
 * for NULL). */
ITERA_API int itera_session_case_open(const itera_session* session);

/* ---- scopes: stages and iterations ---- */
/* A stage named `name`, timed on `stream` (a cudaStream_t; NULL: host time only). Create once,
 * enter and exit as often as needed, destroy when done. */
ITERA_API itera_status itera_scope_create(itera_session* session, const char* name, void* stream, itera_scope** out);
/* An iteration: one repetition of the case, one raw sample. */
ITERA_API itera_status itera_iteration_create(itera_session* session, void* stream, itera_scope** out);
ITERA_API itera_status itera_scope_enter(itera_scope* scope);
ITERA_API itera_status itera_scope_exit(itera_scope* scope);
/* Exits the scope if open (a scope left open out of order fails its case) and frees it. */
ITERA_API void itera_scope_destroy(itera_scope* scope);

/* ---- counters and memory ---- */
ITERA_API itera_status itera_count(itera_session* session, itera_counter what, double amount);
/* Device memory in use (driver view, where CUDA is present), host RSS, and `user_bytes` when >= 0
 * (an allocator's count); -1: no user count. */
ITERA_API itera_status itera_memory_mark(itera_session* session, const char* label, int64_t user_bytes);

/* ---- runner ---- */
/* The callback plays the system under test for one call: return 0 when it succeeded, anything else
 * fails the case (recorded with what was measured before; the run goes on). Server runs call it
 * from `concurrency` threads at once. */
typedef int (*itera_callback)(itera_call* call, void* user_data);

ITERA_API int64_t itera_call_index(const itera_call* call);
ITERA_API int64_t itera_call_batch(const itera_call* call);
ITERA_API double itera_call_scheduled_s(const itera_call* call);
ITERA_API int itera_call_is_warmup(const itera_call* call);
/* `n` output tokens became available to the client now (TTFT, TPOT, ITL; counts output tokens). */
ITERA_API itera_status itera_call_token(itera_call* call, int64_t n);

typedef struct itera_run_options {
  size_t struct_size;            /* sizeof(itera_run_options), set by itera_run_options_init */
  void* stream;                  /* time/wait on this stream (NULL: host clock around each call) */
  const char* const* axis_names; /* extra axes of every case */
  const char* const* axis_values;
  size_t axis_count;
  /* offline */
  uint64_t warmup_min_count;     /* 3 */
  double warmup_min_time_s;      /* 0.05 */
  uint64_t min_samples;          /* 10 */
  uint64_t max_samples;          /* 100000 */
  double min_time_s;             /* 0.5 */
  double max_time_s;             /* 10 */
  double noise_target;           /* 0.005: relative half-width of the median's 95% interval */
  /* server and single stream */
  uint64_t requests;             /* 200 */
  uint64_t seed;                 /* 1 */
  uint64_t warmup_requests;      /* 1 */
  double ttft_target_s;          /* 0: none */
  double tpot_target_s;
  double e2e_target_s;
} itera_run_options;

ITERA_API void itera_run_options_init(itera_run_options* options);
/* One case per batch size. */
ITERA_API itera_status itera_run_offline(itera_session* session, const itera_run_options* options,
                                         const int64_t* batches, size_t batch_count, itera_callback callback,
                                         void* user_data);
/* One case per (concurrency, rate). */
ITERA_API itera_status itera_run_server(itera_session* session, const itera_run_options* options, const double* rates,
                                        size_t rate_count, const int64_t* concurrency, size_t concurrency_count,
                                        itera_callback callback, void* user_data);
ITERA_API itera_status itera_run_single_stream(itera_session* session, const itera_run_options* options,
                                               itera_callback callback, void* user_data);

#ifdef __cplusplus
}
#endif

#endif /* ITERA_ITERA_H */
