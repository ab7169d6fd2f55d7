/* A minimal .npy reader for the examples: little-endian float32, C order (what numpy.save writes
 * for a float32 array). Header-only, C99 and C++. Returns the element count, or -1 with a message
 * on stderr. The caller frees *data with free(). */
#ifndef FERRY_EXAMPLES_NPY_READ_H_
#define FERRY_EXAMPLES_NPY_READ_H_

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long npy_read_f32(const char* path, float** data) {
  FILE* f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "cannot open %s\n", path);
    return -1;
  }
  unsigned char pre[10];
  long count = -1;
  if (fread(pre, 1, 10, f) == 10 && memcmp(pre, "\x93NUMPY", 6) == 0) {
    size_t header_len = pre[8] | (pre[9] << 8);
    if (pre[6] >= 2) { /* version 2+: 4-byte header length */
      unsigned char more[2];
      if (fread(more, 1, 2, f) == 2) header_len |= ((size_t)more[0] << 16) | ((size_t)more[1] << 24);
    }
    char* header = (char*)malloc(header_len + 1);
    if (header && fread(header, 1, header_len, f) == header_len) {
      header[header_len] = '\0';
      if (strstr(header, "'<f4'") && strstr(header, "'fortran_order': False")) {
        long start = ftell(f);
        fseek(f, 0, SEEK_END);
        long bytes = ftell(f) - start;
        fseek(f, start, SEEK_SET);
        *data = (float*)malloc(bytes > 0 ? (size_t)bytes : 1);
        if (*data && fread(*data, 1, (size_t)bytes, f) == (size_t)bytes) count = bytes / 4;
      }
    }
    free(header);
  }
  fclose(f);
  if (count < 0) fprintf(stderr, "%s: not a little-endian float32 C-order .npy file\n", path);
  return count;
}

#endif /* FERRY_EXAMPLES_NPY_READ_H_ */
