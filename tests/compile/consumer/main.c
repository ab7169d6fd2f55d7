/* Loads a model with the installed C API and prints its first input: proves headers, library
 * and package work together. usage: consumer_c MODEL */
#include <stdio.h>

#include <ferry/ferry.h>

int main(int argc, char** argv) {
  if (argc != 2 || ferry_init() != FERRY_OK) return 2;
  ferry_model* model = NULL;
  if (ferry_model_load_from_file(argv[1], &model) != FERRY_OK) {
    fprintf(stderr, "load failed: %s\n", ferry_last_error());
    return 1;
  }
  ferry_tensor_desc d;
  if (ferry_model_get_input_desc(model, 0, &d) != FERRY_OK) return 1;
  printf("ferry %s: input '%s' rank %d, %zu bytes\n", ferry_version(), d.name, d.rank, d.size_bytes);
  ferry_model_unload(model);
  return ferry_finalize() == FERRY_OK ? 0 : 1;
}
