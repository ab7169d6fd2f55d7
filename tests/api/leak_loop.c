/* The C API's whole lifecycle 1,000 times (init, load, datasets, execute, unload, finalize):
 * resident memory must not grow (issue "Hardening", item 6). RSS is read after a warm-up of
 * 100 cycles and again at the end; a leak of even 8 KiB per cycle would add 7 MiB over the 900
 * measured cycles, and the limit is 4 MiB (allocator noise stays well under 1 MiB).
 *   leak_loop MODEL INPUT.npy [CYCLES]                                                       */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ferry/ferry.h"
#include "npy_read.h"

static long rss_kib(void) {
  FILE* f = fopen("/proc/self/statm", "r");
  long pages = 0, resident = 0;
  if (!f) return -1;
  if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = -1;
  fclose(f);
  return resident * 4; /* 4 KiB pages */
}

static int cycle(const char* path, float* image, long n) {
  ferry_model* model = NULL;
  ferry_dataset* inputs = NULL;
  ferry_dataset* outputs = NULL;
  ferry_tensor_desc desc;
  float* scores = NULL;
  int ok = ferry_init() == FERRY_OK && ferry_set_device("cpu") == FERRY_OK &&
           ferry_model_load_from_file(path, &model) == FERRY_OK &&
           ferry_model_get_output_desc(model, 0, &desc) == FERRY_OK;
  /* An output whose size the model leaves open reports 0: give it room (the demo's is 40 bytes). */
  const size_t room = desc.size_bytes > 0 ? desc.size_bytes : (size_t)1 << 16;
  if (ok) scores = (float*)malloc(room);
  ok = ok && scores && ferry_dataset_create(&inputs) == FERRY_OK &&
       ferry_dataset_add_buffer(inputs, image, (size_t)n * sizeof(float)) == FERRY_OK &&
       ferry_dataset_create(&outputs) == FERRY_OK &&
       ferry_dataset_add_buffer(outputs, scores, room) == FERRY_OK &&
       ferry_execute(model, inputs, outputs) == FERRY_OK;
  if (!ok) fprintf(stderr, "leak_loop: %s\n", ferry_last_error());
  if (inputs) ferry_dataset_destroy(inputs);
  if (outputs) ferry_dataset_destroy(outputs);
  if (model) ferry_model_unload(model);
  ferry_finalize();
  free(scores);
  return ok;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s MODEL INPUT.npy [CYCLES]\n", argv[0]);
    return 2;
  }
  const int cycles = argc > 3 ? atoi(argv[3]) : 1000;
  float* image = NULL;
  long n = npy_read_f32(argv[2], &image);
  if (n < 0 || cycles < 200) return 2;
  long warm = 0;
  for (int i = 0; i < cycles; ++i) {
    if (!cycle(argv[1], image, n)) return 1;
    if (i == 99) warm = rss_kib();
  }
  const long end = rss_kib();
  free(image);
  printf("%d load/run/unload cycles: RSS %ld KiB after 100, %ld KiB after %d (growth %ld KiB)\n", cycles, warm, end,
         cycles, end - warm);
  if (warm < 0 || end < 0) return 1;
  return end - warm > 4096 ? 1 : 0;
}
