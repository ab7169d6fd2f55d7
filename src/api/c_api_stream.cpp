// Streams: an in-order queue of executions served by one worker thread (the CPU analogue of a
// device stream). The first failure is kept with its message until ferry_stream_synchronize.
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "api/c_api_internal.h"

struct ferry_stream {
  std::mutex mu;
  std::condition_variable work_cv;  // signals the worker
  std::condition_variable idle_cv;  // signals synchronize
  std::deque<std::function<void()>> queue;
  bool busy = false;
  bool stop = false;
  ferry_status first_error = FERRY_OK;
  std::string first_message;
  std::thread worker;

  void loop() {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      work_cv.wait(lock, [this] { return stop || !queue.empty(); });
      if (queue.empty()) return;  // stop requested and nothing left
      auto job = std::move(queue.front());
      queue.pop_front();
      busy = true;
      lock.unlock();
      job();
      lock.lock();
      busy = false;
      if (queue.empty()) idle_cv.notify_all();
    }
  }
  void wait_idle() {
    std::unique_lock<std::mutex> lock(mu);
    idle_cv.wait(lock, [this] { return queue.empty() && !busy; });
  }
};

using ferry::capi::fail;
using ferry::capi::guard;

extern "C" {

ferry_status ferry_stream_create(ferry_stream** stream) {
  return guard([&] {
    if (!stream) return fail(FERRY_ERROR_INVALID_ARGUMENT, "ferry_stream_create: stream is null");
    auto s = std::make_unique<ferry_stream>();
    s->worker = std::thread([p = s.get()] { p->loop(); });
    *stream = s.release();
    return FERRY_OK;
  });
}

ferry_status ferry_stream_destroy(ferry_stream* stream) {
  return guard([&] {
    if (!stream) return FERRY_OK;
    {
      std::lock_guard<std::mutex> lock(stream->mu);
      stream->stop = true;
    }
    stream->work_cv.notify_all();
    stream->worker.join();
    delete stream;
    return FERRY_OK;
  });
}

ferry_status ferry_execute_async(ferry_model* model, const ferry_dataset* inputs, ferry_dataset* outputs,
                                 ferry_stream* stream) {
  return guard([&] {
    if (!stream) return fail(FERRY_ERROR_INVALID_ARGUMENT, "ferry_execute_async: stream is null");
    if (ferry_status s = ferry::capi::check_execute_args(model, inputs, outputs); s != FERRY_OK) return s;
    auto job = [model, inputs, outputs, stream] {
      const ferry_status s = guard([&] { return ferry::capi::execute(model, inputs, outputs); });
      if (s != FERRY_OK) {
        std::lock_guard<std::mutex> lock(stream->mu);
        if (stream->first_error == FERRY_OK) {
          stream->first_error = s;
          stream->first_message = ferry_last_error();  // the worker thread's message
        }
      }
    };
    {
      std::lock_guard<std::mutex> lock(stream->mu);
      stream->queue.push_back(std::move(job));
    }
    stream->work_cv.notify_one();
    return FERRY_OK;
  });
}

ferry_status ferry_stream_synchronize(ferry_stream* stream) {
  return guard([&] {
    if (!stream) return fail(FERRY_ERROR_INVALID_ARGUMENT, "ferry_stream_synchronize: stream is null");
    stream->wait_idle();
    std::lock_guard<std::mutex> lock(stream->mu);
    const ferry_status s = stream->first_error;
    if (s == FERRY_OK) return FERRY_OK;
    stream->first_error = FERRY_OK;
    return fail(s, std::move(stream->first_message));
  });
}

}  // extern "C"
