/* classify: the seeds' ACL program (aclInit, aclrtSetDevice, aclmdlLoadFromFile, datasets,
 * aclmdlExecute, aclFinalize) done with ferry's C API. Loads a compiled model, feeds an image
 * tensor from a .npy file, and prints the top class of each row of the first output.
 *
 *   ferry compile demo/digits_cnn.onnx -o digits.ferry --input-shape image:1,1,28,28
 *   classify digits.ferry demo/samples/digit_0_label3.npy      ->  "class 3 (score 9.81)"
 */
#include <stdio.h>
#include <stdlib.h>

#include "ferry/ferry.h"
#include "npy_read.h"

#define CHECK(call)                                                                   \
  do {                                                                                \
    ferry_status s_ = (call);                                                         \
    if (s_ != FERRY_OK) {                                                             \
      fprintf(stderr, "%s failed: %s: %s\n", #call, ferry_status_name(s_), ferry_last_error()); \
      return 2;                                                                       \
    }                                                                                 \
  } while (0)

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s MODEL.ferry IMAGE.npy\n", argv[0]);
    return 2;
  }
  float* image = NULL;
  long n = npy_read_f32(argv[2], &image);
  if (n < 0) return 2;

  CHECK(ferry_init());
  CHECK(ferry_set_device("cpu"));
  ferry_model* model = NULL;
  CHECK(ferry_model_load_from_file(argv[1], &model));
  if (ferry_model_num_inputs(model) != 1 || ferry_model_num_outputs(model) < 1) {
    fprintf(stderr, "expected a model with one input and at least one output\n");
    return 2;
  }
  ferry_tensor_desc out_desc;
  CHECK(ferry_model_get_output_desc(model, 0, &out_desc));
  if (out_desc.dtype != FERRY_DTYPE_FLOAT32 || out_desc.size_bytes == 0) {
    fprintf(stderr, "output '%s' is not a float32 tensor of known size\n", out_desc.name);
    return 2;
  }
  float* scores = (float*)malloc(out_desc.size_bytes);

  ferry_dataset* inputs = NULL;
  ferry_dataset* outputs = NULL;
  CHECK(ferry_dataset_create(&inputs));
  CHECK(ferry_dataset_add_buffer(inputs, image, (size_t)n * sizeof(float)));
  CHECK(ferry_dataset_create(&outputs));
  CHECK(ferry_dataset_add_buffer(outputs, scores, out_desc.size_bytes));
  CHECK(ferry_execute(model, inputs, outputs));

  int32_t rank = 0;
  int64_t dims[FERRY_MAX_RANK];
  CHECK(ferry_dataset_get_dims(outputs, 0, &rank, dims));
  const int64_t classes = rank > 0 ? dims[rank - 1] : 1;
  int64_t rows = 1;
  for (int32_t i = 0; i + 1 < rank; ++i) rows *= dims[i];
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = scores + r * classes;
    int64_t best = 0;
    for (int64_t c = 1; c < classes; ++c)
      if (row[c] > row[best]) best = c;
    printf("class %lld (score %.4f)\n", (long long)best, row[best]);
  }

  ferry_dataset_destroy(inputs);
  ferry_dataset_destroy(outputs);
  CHECK(ferry_model_unload(model));
  CHECK(ferry_finalize());
  free(scores);
  free(image);
  return 0;
}
