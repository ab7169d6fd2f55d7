/* ferry C API: load a compiled model (.ferry, from `ferry compile`) or an ONNX model, bind
 * input and output buffers, and run it, synchronously or on streams.
 *
 * Conventions
 *  - Every function returns a ferry_status (FERRY_OK = 0) except the simple getters, which
 *    document what they return on bad arguments. After an error, ferry_last_error() gives a
 *    message for the calling thread (it names the file, input or limit, and what to try).
 *  - Handles are opaque. No C++ exception ever crosses this API.
 *  - Call ferry_init() once before anything else and ferry_finalize() at the end.
 *  - A model may be executed from many threads at once, each with its own datasets.
 *  - Input buffers are used in place (no copy) during an execution; output buffers receive the
 *    results. Buffers stay owned by the caller and must stay valid until the execution ends
 *    (for ferry_execute_async: until ferry_stream_synchronize returns).
 *
 * The typical program (examples/classify.c):
 *   ferry_init(); ferry_set_device("cpu");
 *   ferry_model_load_from_file("model.ferry", &model);
 *   ferry_dataset_create(&in);  ferry_dataset_add_buffer(in, image, image_bytes);
 *   ferry_dataset_create(&out); ferry_dataset_add_buffer(out, logits, logits_bytes);
 *   ferry_execute(model, in, out);
 *   ferry_dataset_destroy(in); ferry_dataset_destroy(out); ferry_model_unload(model); ferry_finalize();
 */
#ifndef FERRY_FERRY_H_
#define FERRY_FERRY_H_

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define FERRY_API __declspec(dllexport)
#elif defined(FERRY_BUILDING_LIBRARY)
#define FERRY_API __attribute__((visibility("default")))
#else
#define FERRY_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/** Result of every call. */
typedef enum ferry_status {
  FERRY_OK = 0,
  FERRY_ERROR_INVALID_ARGUMENT = 1, /**< a bad argument: null handle, wrong buffer size, unknown name */
  FERRY_ERROR_INVALID_MODEL = 2,    /**< the model file is malformed, corrupted, or for another version/ISA */
  FERRY_ERROR_UNSUPPORTED = 3,      /**< valid, but ferry cannot run it (op, device) */
  FERRY_ERROR_NOT_FOUND = 4,        /**< a file or device that does not exist */
  FERRY_ERROR_RESOURCE_EXHAUSTED = 5, /**< out of memory or over a limit */
  FERRY_ERROR_NOT_INITIALIZED = 6,  /**< ferry_init() was not called */
  FERRY_ERROR_INTERNAL = 7          /**< a bug in ferry */
} ferry_status;

/** Element types (values equal ONNX's TensorProto numbering). */
typedef enum ferry_dtype {
  FERRY_DTYPE_UNDEFINED = 0,
  FERRY_DTYPE_FLOAT32 = 1,
  FERRY_DTYPE_UINT8 = 2,
  FERRY_DTYPE_INT8 = 3,
  FERRY_DTYPE_UINT16 = 4,
  FERRY_DTYPE_INT16 = 5,
  FERRY_DTYPE_INT32 = 6,
  FERRY_DTYPE_INT64 = 7,
  FERRY_DTYPE_BOOL = 9,
  FERRY_DTYPE_FLOAT16 = 10,
  FERRY_DTYPE_FLOAT64 = 11,
  FERRY_DTYPE_UINT32 = 12,
  FERRY_DTYPE_UINT64 = 13,
  FERRY_DTYPE_BFLOAT16 = 16
} ferry_dtype;

/** Largest rank a tensor description holds. */
#define FERRY_MAX_RANK 16

/** An input or output of a model. dims[i] < 0: not fixed (e.g. the batch of a multi-gear model,
 *  whose largest gear sets `size_bytes`). */
typedef struct ferry_tensor_desc {
  const char* name;       /**< valid while the model is loaded */
  ferry_dtype dtype;
  int32_t rank;
  int64_t dims[FERRY_MAX_RANK];
  size_t size_bytes;      /**< bytes of the tensor at its largest shape (0 when unknown) */
} ferry_tensor_desc;

typedef struct ferry_model ferry_model;     /**< a loaded model */
typedef struct ferry_dataset ferry_dataset; /**< an ordered list of user buffers */
typedef struct ferry_stream ferry_stream;   /**< an in-order queue of executions */

/* ---- Errors and lifecycle ---- */

/** The message of the calling thread's last failed call ("" if none). Valid until the next call. */
FERRY_API const char* ferry_last_error(void);
/** A short name for a status ("FERRY_ERROR_INVALID_MODEL"). */
FERRY_API const char* ferry_status_name(ferry_status status);
/** The library version ("0.1.0"). */
FERRY_API const char* ferry_version(void);

/** Initializes the library; may be called more than once (counted). */
FERRY_API ferry_status ferry_init(void);
/** Releases what ferry_init acquired once every ferry_init is matched. Models must be unloaded first. */
FERRY_API ferry_status ferry_finalize(void);

/* ---- Devices ---- */

/** Number of devices compiled in ("cpu", "cpu-ref", ...). */
FERRY_API ferry_status ferry_device_count(int32_t* count);
/** Name of device `index` (valid for the life of the process). */
FERRY_API ferry_status ferry_device_name(int32_t index, const char** name);
/** Selects the device later model loads use (default: the device the model was compiled for). */
FERRY_API ferry_status ferry_set_device(const char* name);
/** Sets the intra-op threads of later model loads (0: the tuned count in the file, else all cores). */
FERRY_API ferry_status ferry_set_num_threads(int32_t threads);

/* ---- Models ---- */

/** Loads a compiled .ferry file (mapped, weights used in place) or an .onnx file (optimized at
 *  load). Validates version, ISA and checksum. */
FERRY_API ferry_status ferry_model_load_from_file(const char* path, ferry_model** model);
/** Loads a compiled model from `size` bytes at `data` (copied; `data` may be freed afterwards). */
FERRY_API ferry_status ferry_model_load_from_memory(const void* data, size_t size, ferry_model** model);
/** Unloads a model; it must not be executing. Null is accepted. */
FERRY_API ferry_status ferry_model_unload(ferry_model* model);

/** Number of inputs (0 for a null model). */
FERRY_API size_t ferry_model_num_inputs(const ferry_model* model);
/** Number of outputs (0 for a null model). */
FERRY_API size_t ferry_model_num_outputs(const ferry_model* model);
/** Describes input `index`. */
FERRY_API ferry_status ferry_model_get_input_desc(const ferry_model* model, size_t index, ferry_tensor_desc* desc);
/** Describes output `index`. */
FERRY_API ferry_status ferry_model_get_output_desc(const ferry_model* model, size_t index, ferry_tensor_desc* desc);
/** The compiled batch sizes (`--dynamic-batch`), ascending. `*count` is the capacity of `sizes`
 *  on entry and the number of gears on return (0: one plan with fixed shapes). */
FERRY_API ferry_status ferry_model_get_batch_sizes(const ferry_model* model, int64_t* sizes, size_t* count);

/* ---- Datasets ---- */

/** Creates an empty dataset. */
FERRY_API ferry_status ferry_dataset_create(ferry_dataset** dataset);
/** Destroys a dataset (not the buffers, which the caller owns). Null is accepted. */
FERRY_API ferry_status ferry_dataset_destroy(ferry_dataset* dataset);
/** Appends a buffer: the i-th buffer is the model's i-th input (or output). For a multi-gear
 *  model an input's batch is size / (bytes of one sample). */
FERRY_API ferry_status ferry_dataset_add_buffer(ferry_dataset* dataset, void* data, size_t size);
/** Number of buffers (0 for a null dataset). */
FERRY_API size_t ferry_dataset_num_buffers(const ferry_dataset* dataset);
/** After an execution: the shape written into output buffer `index` (rank and up to FERRY_MAX_RANK dims). */
FERRY_API ferry_status ferry_dataset_get_dims(const ferry_dataset* dataset, size_t index, int32_t* rank, int64_t* dims);

/* ---- Execution ---- */

/** Runs the model on `inputs`, writing `outputs` (each buffer at least the output's size).
 *  Thread-safe for one model across threads with distinct datasets. */
FERRY_API ferry_status ferry_execute(ferry_model* model, const ferry_dataset* inputs, ferry_dataset* outputs);

/** Creates a stream: executions queued on it run in order on a worker thread. */
FERRY_API ferry_status ferry_stream_create(ferry_stream** stream);
/** Waits for the stream's work, then destroys it. Null is accepted. */
FERRY_API ferry_status ferry_stream_destroy(ferry_stream* stream);
/** Queues an execution on `stream` and returns at once. Argument errors are reported here;
 *  execution errors by ferry_stream_synchronize. The datasets and buffers must stay valid and
 *  unchanged until then. */
FERRY_API ferry_status ferry_execute_async(ferry_model* model, const ferry_dataset* inputs, ferry_dataset* outputs,
                                           ferry_stream* stream);
/** Waits until every execution queued on `stream` is done; returns the first error among them
 *  (and clears it), FERRY_OK when all succeeded. */
FERRY_API ferry_status ferry_stream_synchronize(ferry_stream* stream);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif  /* FERRY_FERRY_H_ */
