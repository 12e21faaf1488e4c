/* The C API from C11, through libitera.so: sessions, scopes, counters, marks, the runner, and every
 * misuse returning its status with a message naming the problem, per thread. Writes its results
 * under the folder given (the e2e test reads them with `itera report`).
 *   itera_c_api_test OUT_DIR */
#define _POSIX_C_SOURCE 200809L
#include <itera/itera.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static int failures = 0;

#define EXPECT(cond)                                                           \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: FAILED: %s\n", __FILE__, __LINE__, #cond);       \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

/* `call` returned `want` and the thread's last error contains `part`. */
#define EXPECT_STATUS(call, want, part)                                                                   \
  do {                                                                                                    \
    itera_status got_ = (call);                                                                           \
    if (got_ != (want) || strstr(itera_last_error(), (part)) == NULL) {                                  \
      fprintf(stderr, "%s:%d: FAILED: %s returned %s (wanted %s), message: \"%s\" (wanted \"%s\")\n",      \
              __FILE__, __LINE__, #call, itera_status_name(got_), itera_status_name(want),               \
              itera_last_error(), (part));                                                               \
      ++failures;                                                                                         \
    }                                                                                                     \
  } while (0)

#define OK(call) EXPECT_STATUS(call, ITERA_OK, "")

static void sleep_us(long us) {
  struct timespec t = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&t, NULL);
}

static char* path_in(const char* dir, const char* name) {
  static char buffers[4][1024];
  static int next = 0;
  char* b = buffers[next++ % 4];
  snprintf(b, 1024, "%s/%s", dir, name);
  remove(b);
  return b;
}

static int returns_3_on_call_5(itera_call* call, void* user) {
  (void)user;
  sleep_us(200);
  return itera_call_index(call) == 5 ? 3 : 0;
}

static int counts_tokens(itera_call* call, void* user) {
  itera_session* s = (itera_session*)user;
  itera_scope* st = NULL;
  if (itera_scope_create(s, "handle", NULL, &st) != ITERA_OK) return 1;
  if (itera_scope_enter(st) != ITERA_OK) return 1;
  sleep_us(300);
  int rc = itera_call_token(call, 1) != ITERA_OK;
  sleep_us(300);
  rc |= itera_call_token(call, 1) != ITERA_OK;
  rc |= itera_scope_exit(st) != ITERA_OK;
  itera_scope_destroy(st);
  return rc;
}

/* Fails on its thread: the main thread's last error must not change. */
static void* fail_elsewhere(void* unused) {
  (void)unused;
  itera_session* s = NULL;
  itera_session_options o;
  itera_session_options_init(&o);
  (void)itera_session_open(&o, &s); /* no name */
  return strstr(itera_last_error(), "name") != NULL ? (void*)1 : NULL;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const char* dir = argv[1];
  mkdir(dir, 0755);

  EXPECT(itera_abi_version() == ITERA_C_ABI_VERSION);
  EXPECT(strlen(itera_version()) > 0);
  EXPECT(strcmp(itera_status_name(ITERA_ERROR_STAGE), "ITERA_ERROR_STAGE") == 0);

  /* Opening: errors first. */
  itera_session_options o;
  itera_session_options_init(&o);
  itera_session* s = NULL;
  EXPECT_STATUS(itera_session_open(&o, &s), ITERA_ERROR_USAGE, "itera_session_options.name is NULL");
  EXPECT(s == NULL);
  EXPECT_STATUS(itera_session_open(NULL, &s), ITERA_ERROR_USAGE, "options is NULL");
  o.struct_size = 3;
  o.name = "c-api";
  EXPECT_STATUS(itera_session_open(&o, &s), ITERA_ERROR_USAGE, "struct_size is 3");
  itera_session_options_init(&o);
  o.name = "c-api";
  o.device = ITERA_DEVICE_NONE;
  o.label = "c api test";
  o.results_path = path_in(dir, "c_api.jsonl");
  OK(itera_session_open(&o, &s));
  EXPECT(s != NULL);
  EXPECT(strcmp(itera_session_backend(s), "cpu") == 0);
  EXPECT(itera_session_device(s) == -1);
  itera_session* again = NULL;
  EXPECT_STATUS(itera_session_open(&o, &again), ITERA_ERROR_USAGE, "already exists");

  /* The last error is per thread. */
  EXPECT_STATUS(itera_count(s, (itera_counter)99, 1), ITERA_ERROR_USAGE, "counter 99 does not exist");
  pthread_t t;
  void* other_saw_its_own = NULL;
  pthread_create(&t, NULL, fail_elsewhere, NULL);
  pthread_join(t, &other_saw_its_own);
  EXPECT(other_saw_its_own != NULL);
  EXPECT(strstr(itera_last_error(), "counter 99") != NULL);

  /* Case 1: the application's loop, with warm-up, nested stages, counters, a memory mark. */
  OK(itera_session_set_field(s, "model", "c-model"));
  const char* names[] = {"batch", "loop"};
  const char* values[] = {"2", "compute"};
  EXPECT_STATUS(itera_case_begin(s, names, NULL, 2, 0), ITERA_ERROR_USAGE, "NULL");
  OK(itera_case_begin(s, names, values, 2, 2));
  OK(itera_case_set_field(s, "precision.compute", "fp32"));
  itera_scope *iteration = NULL, *step = NULL, *inner = NULL;
  OK(itera_iteration_create(s, NULL, &iteration));
  OK(itera_scope_create(s, "step", NULL, &step));
  itera_scope* refused = iteration;
  EXPECT_STATUS(itera_scope_create(s, "a/b", NULL, &refused), ITERA_ERROR_USAGE, "contains '/'");
  EXPECT(refused == NULL);
  OK(itera_scope_create(s, "inner", NULL, &inner));
  for (int i = 0; i < 2 + 5; ++i) {
    OK(itera_scope_enter(iteration));
    OK(itera_scope_enter(step));
    OK(itera_scope_enter(inner));
    sleep_us(500);
    OK(itera_count(s, ITERA_COUNT_BYTES_READ, 4096));
    OK(itera_scope_exit(inner));
    OK(itera_scope_exit(step));
    OK(itera_count(s, ITERA_COUNT_ITEMS, 2));
    OK(itera_scope_exit(iteration));
  }
  OK(itera_memory_mark(s, "peak", 123456));
  EXPECT_STATUS(itera_memory_mark(s, "peak", -9), ITERA_ERROR_USAGE, "negative");
  EXPECT_STATUS(itera_count(s, ITERA_COUNT_ITEMS, -1), ITERA_ERROR_USAGE, "not a finite number");

  /* Misuse of scopes: each refused with ITERA_ERROR_STAGE, nothing recorded changes. */
  EXPECT_STATUS(itera_scope_exit(step), ITERA_ERROR_STAGE, "stage 'step' exited twice");
  OK(itera_scope_enter(step));
  OK(itera_scope_enter(inner));
  EXPECT_STATUS(itera_scope_exit(step), ITERA_ERROR_STAGE, "inside it is still open");
  EXPECT_STATUS(itera_scope_enter(inner), ITERA_ERROR_STAGE, "already open");
  OK(itera_scope_exit(inner));
  OK(itera_scope_exit(step));
  OK(itera_case_end(s));

  /* Case 2: a stage never exited fails the case, which is written with what it measured. */
  const char* v2[] = {"4", "compute"};
  OK(itera_case_begin(s, names, v2, 2, 0));
  OK(itera_scope_enter(iteration));
  sleep_us(200);
  OK(itera_scope_exit(iteration));
  OK(itera_scope_enter(step));
  EXPECT_STATUS(itera_case_end(s), ITERA_ERROR_STAGE, "stage 'step' was never exited");
  EXPECT_STATUS(itera_scope_exit(step), ITERA_ERROR_STAGE, "still open when its case ended");
  EXPECT_STATUS(itera_case_end(s), ITERA_ERROR_USAGE, "no case is open");

  /* The runner: a callback returning non-zero fails its case; the next runs. */
  itera_run_options r;
  itera_run_options_init(&r);
  r.struct_size = 0;
  const int64_t batches[] = {1, 2};
  EXPECT_STATUS(itera_run_offline(s, &r, batches, 2, returns_3_on_call_5, NULL), ITERA_ERROR_USAGE,
                "itera_run_options_init");
  itera_run_options_init(&r);
  r.warmup_min_count = 2;
  r.warmup_min_time_s = 0;
  r.min_time_s = 0.01;
  r.max_time_s = 0.1;
  EXPECT_STATUS(itera_run_offline(s, &r, batches, 2, NULL, NULL), ITERA_ERROR_USAGE, "callback is NULL");
  EXPECT_STATUS(itera_run_offline(s, &r, batches, 2, returns_3_on_call_5, NULL), ITERA_ERROR_CALLBACK,
                "the callback returned 3");
  EXPECT(strstr(itera_last_error(), "2 of 2 cases failed") != NULL);

  /* Server and single stream with tokens; an extra axis; targets. */
  const char* an[] = {"model"};
  const char* av[] = {"c-model"};
  r.axis_names = an;
  r.axis_values = av;
  r.axis_count = 1;
  r.requests = 16;
  r.e2e_target_s = 1.0;
  const double rates[] = {100};
  const int64_t concurrency[] = {2};
  OK(itera_run_server(s, &r, rates, 1, concurrency, 1, counts_tokens, s));
  r.requests = 8;
  OK(itera_run_single_stream(s, &r, counts_tokens, s));
  EXPECT_STATUS(itera_run_server(s, &r, rates, 0, concurrency, 1, counts_tokens, s), ITERA_ERROR_USAGE,
                "rates is empty");

  itera_scope_destroy(inner);
  itera_scope_destroy(step);
  itera_scope_destroy(iteration);
  OK(itera_session_close(s));
  EXPECT(itera_session_close(NULL) == ITERA_OK);

  /* A session in memory only, closed with a stage open: the close reports it. */
  itera_session_options_init(&o);
  o.name = "c-api-memory";
  o.device = ITERA_DEVICE_NONE;
  OK(itera_session_open(&o, &s));
  itera_scope* open_stage = NULL;
  OK(itera_scope_create(s, "left-open", NULL, &open_stage));
  OK(itera_scope_enter(open_stage));
  EXPECT_STATUS(itera_session_close(s), ITERA_ERROR_STAGE, "stage 'left-open' was never exited");
  itera_scope_destroy(open_stage); /* outlives its session: destroying it is still safe */

  /* A case failed on purpose: written as failed with the reason, what it measured kept; a scope
   * still open is named after the reason, and is no error here. */
  itera_session_options_init(&o);
  o.name = "c-api-fail";
  o.device = ITERA_DEVICE_NONE;
  o.results_path = path_in(dir, "c_api_fail.jsonl");
  OK(itera_session_open(&o, &s));
  EXPECT(itera_session_case_open(s) == 0);
  EXPECT(itera_session_case_open(NULL) == 0);
  EXPECT_STATUS(itera_session_fail_case(s, "nothing to fail"), ITERA_ERROR_USAGE, "no case is open to fail");
  const char* fail_names[] = {"batch"};
  const char* fail_values[] = {"8"};
  OK(itera_case_begin(s, fail_names, fail_values, 1, 0));
  EXPECT(itera_session_case_open(s) == 1);
  itera_scope *fail_iteration = NULL, *fail_stage = NULL;
  OK(itera_iteration_create(s, NULL, &fail_iteration));
  OK(itera_scope_create(s, "decode", NULL, &fail_stage));
  for (int i = 0; i < 3; ++i) {
    OK(itera_scope_enter(fail_iteration));
    sleep_us(100);
    OK(itera_count(s, ITERA_COUNT_IMAGES, 1));
    OK(itera_scope_exit(fail_iteration));
  }
  OK(itera_scope_enter(fail_stage));
  EXPECT_STATUS(itera_session_fail_case(s, NULL), ITERA_ERROR_USAGE, "the reason is NULL");
  EXPECT_STATUS(itera_session_fail_case(s, ""), ITERA_ERROR_USAGE, "fail_case needs a reason");
  EXPECT(itera_session_case_open(s) == 1); /* refused: the case is still open */
  OK(itera_session_fail_case(s, "decoder returned garbage"));
  EXPECT(itera_session_case_open(s) == 0);
  EXPECT_STATUS(itera_session_fail_case(s, "again"), ITERA_ERROR_USAGE, "no case is open to fail");
  EXPECT_STATUS(itera_scope_exit(fail_stage), ITERA_ERROR_STAGE, "still open when its case ended");
  OK(itera_count(s, ITERA_COUNT_ITEMS, 1)); /* begins a case with no axes */
  EXPECT(itera_session_case_open(s) == 1);
  itera_scope_destroy(fail_stage);
  itera_scope_destroy(fail_iteration);
  OK(itera_session_close(s));
  {
    FILE* f = fopen(o.results_path, "r");
    EXPECT(f != NULL);
    char line[16384];
    int failed_lines = 0, ok_lines = 0;
    while (f && fgets(line, sizeof line, f)) {
      if (strstr(line, "\"status\":\"failed\"")) {
        ++failed_lines;
        EXPECT(strstr(line, "\"message\":\"decoder returned garbage; and stage 'decode' was never exited") != NULL);
        EXPECT(strstr(line, "\"batch\":\"8\"") != NULL);
        EXPECT(strstr(line, "\"count/images\"") != NULL); /* what it measured is kept */
      } else if (strstr(line, "\"status\":\"ok\"")) {
        ++ok_lines;
      }
    }
    if (f) fclose(f);
    EXPECT(failed_lines == 1 && ok_lines == 1);
  }

  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("itera C API: all checks passed (results in %s)\n", dir);
  return 0;
}
