/* Profiling a small image pipeline from C with itera's C API (docs/user-api.md).
 *
 *   itera_example_c RESULTS.jsonl [ITERATIONS]
 *
 * The pipeline decodes a synthetic image (a generator standing in for a JPEG decoder), halves its
 * resolution and runs a dot-product "model" over it, on the host. Part 1 instruments the
 * application's own loop: one case per image side, an iteration per image, a stage per step,
 * counters and memory marks. Part 2 hands the same work to itera's offline runner, which sweeps
 * the batch size with warm-up and its stopping rule. Then: itera report RESULTS.jsonl */
#include <itera/itera.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                                       \
  do {                                                                                                    \
    itera_status check_status_ = (call);                                                                  \
    if (check_status_ != ITERA_OK) {                                                                      \
      fprintf(stderr, "%s: %s: %s\n", #call, itera_status_name(check_status_), itera_last_error());     \
      return 1;                                                                                           \
    }                                                                                                     \
  } while (0)

typedef struct pipeline {
  size_t side;
  float* pixels; /* side x side */
  float* half;   /* side/2 x side/2 */
  float weights[64];
  double sink;
} pipeline;

static void decode(pipeline* p, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 1u;
  for (size_t i = 0; i < p->side * p->side; ++i) {
    x = x * 1664525u + 1013904223u;
    p->pixels[i] = (float)(x >> 8) / 16777216.0f;
  }
}

static void halve(pipeline* p) {
  const size_t h = p->side / 2;
  for (size_t r = 0; r < h; ++r)
    for (size_t c = 0; c < h; ++c) {
      const float* a = p->pixels + 2 * r * p->side + 2 * c;
      p->half[r * h + c] = 0.25f * (a[0] + a[1] + a[p->side] + a[p->side + 1]);
    }
}

static void infer(pipeline* p) {
  const size_t n = (p->side / 2) * (p->side / 2);
  double acc = 0;
  for (int pass = 0; pass < 8; ++pass)
    for (size_t i = 0; i < n; ++i) acc += p->half[i] * p->weights[(i + (size_t)pass) % 64];
  p->sink += acc;
}

typedef struct app {
  itera_session* session;
  pipeline* p;
  itera_scope *decode, *halve, *infer;
} app;

/* One image through the three stages, each a scope; counted as an image and its bytes. */
static int one_image(app* a, uint32_t seed) {
  const double bytes = (double)(a->p->side * a->p->side * sizeof(float));
  CHECK(itera_scope_enter(a->decode));
  decode(a->p, seed);
  CHECK(itera_count(a->session, ITERA_COUNT_BYTES_WRITTEN, bytes));
  CHECK(itera_scope_exit(a->decode));
  CHECK(itera_scope_enter(a->halve));
  halve(a->p);
  CHECK(itera_count(a->session, ITERA_COUNT_BYTES_READ, bytes));
  CHECK(itera_scope_exit(a->halve));
  CHECK(itera_scope_enter(a->infer));
  infer(a->p);
  CHECK(itera_count(a->session, ITERA_COUNT_FLOPS, 2.0 * 8 * (double)(a->p->side / 2) * (double)(a->p->side / 2)));
  CHECK(itera_scope_exit(a->infer));
  return itera_count(a->session, ITERA_COUNT_IMAGES, 1) == ITERA_OK ? 0 : 1;
}

/* The offline runner's callback: a batch of images per call. 0: success. */
static int one_batch(itera_call* call, void* user) {
  app* a = (app*)user;
  for (int64_t i = 0; i < itera_call_batch(call); ++i)
    if (one_image(a, (uint32_t)(itera_call_index(call) * 131 + i)) != 0) return 1;
  return 0;
}

static int set_side(pipeline* p, size_t side) {
  free(p->pixels);
  free(p->half);
  p->side = side;
  p->pixels = malloc(side * side * sizeof(float));
  p->half = malloc((side / 2) * (side / 2) * sizeof(float));
  return p->pixels && p->half ? 0 : 1;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s RESULTS.jsonl [ITERATIONS]\n", argv[0]);
    return 2;
  }
  const int iterations = argc > 2 ? atoi(argv[2]) : 50;
  pipeline p = {0};
  for (int i = 0; i < 64; ++i) p.weights[i] = (float)(i % 7) - 3.0f;

  itera_session_options o;
  itera_session_options_init(&o);
  o.name = "c-pipeline";
  o.results_path = argv[1];
  o.device = ITERA_DEVICE_NONE; /* host work: say so rather than time a GPU nobody uses */
  itera_session* s = NULL;
  CHECK(itera_session_open(&o, &s));
  CHECK(itera_session_set_field(s, "pipeline", "decode-halve-infer"));
  CHECK(itera_session_set_field(s, "precision.compute", "fp32"));

  app a = {s, &p, NULL, NULL, NULL};
  itera_scope* image = NULL;
  CHECK(itera_iteration_create(s, NULL, &image));
  CHECK(itera_scope_create(s, "decode", NULL, &a.decode));
  CHECK(itera_scope_create(s, "halve", NULL, &a.halve));
  CHECK(itera_scope_create(s, "infer", NULL, &a.infer));

  /* Part 1: the application's own loop. */
  const size_t sides[] = {128, 256};
  for (int k = 0; k < 2; ++k) {
    char side_text[16];
    snprintf(side_text, sizeof side_text, "%zu", sides[k]);
    const char* names[] = {"side", "scenario"};
    const char* values[] = {side_text, "own_loop"};
    if (set_side(&p, sides[k]) != 0) return 1;
    CHECK(itera_case_begin(s, names, values, 2, 3)); /* the first 3 images are warm-up */
    for (int i = 0; i < iterations + 3; ++i) {
      CHECK(itera_scope_enter(image));
      if (one_image(&a, (uint32_t)i) != 0) return 1;
      CHECK(itera_scope_exit(image));
    }
    CHECK(itera_memory_mark(s, "buffers", (int64_t)((sides[k] * sides[k] + (sides[k] / 2) * (sides[k] / 2)) * sizeof(float))));
    CHECK(itera_case_end(s));
  }

  /* Part 2: the offline runner sweeps the batch size. */
  if (set_side(&p, 128) != 0) return 1;
  itera_run_options r;
  itera_run_options_init(&r);
  const char* names[] = {"side"};
  const char* values[] = {"128"};
  r.axis_names = names;
  r.axis_values = values;
  r.axis_count = 1;
  r.min_time_s = 0.05;
  r.max_time_s = 0.3;
  r.warmup_min_time_s = 0.01;
  const int64_t batches[] = {1, 4};
  CHECK(itera_run_offline(s, &r, batches, 2, one_batch, &a));

  itera_scope_destroy(a.infer);
  itera_scope_destroy(a.halve);
  itera_scope_destroy(a.decode);
  itera_scope_destroy(image);
  CHECK(itera_session_close(s));
  free(p.pixels);
  free(p.half);
  printf("wrote %s (checksum %.3f)\n", argv[1], p.sink);
  return 0;
}
