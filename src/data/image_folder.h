// An ImageFolder data set (torchvision's layout): ROOT/<class>/**/<image>, classes = the sorted
// subfolder names, label = the class's position. Samples are decoded (io/image.h) and
// transformed (io/image_transform.h) on load: the training pipeline (RandomResizedCrop +
// horizontal flip) or the evaluation one (Resize + CenterCrop), then normalized into float CHW.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "io/image.h"
#include "data/dataset.h"

namespace ferry {

struct ImageFolderOptions {
  /// The model input the images feed (named in the batch).
  std::string input_name = "input";
  /// Output side S: each sample is [3, S, S] float32.
  int64_t image_size = 224;
  /// true: RandomResizedCrop(S) + RandomHorizontalFlip; false: Resize(round(S*256/224)) + CenterCrop(S).
  bool train = true;
  /// false: any unreadable image is an error naming the file. true: files whose header cannot be
  /// read (not an image, unsupported format, too large, truncated header) are left out when the
  /// folder is scanned (skipped_files()), and a file that still fails to decode when loaded is
  /// replaced by the next sample that decodes (replaced_samples()).
  bool skip_bad_images = false;
  /// Threads probing headers when skip_bad_images scans the folder (0: the machine's cores, at most 8).
  int scan_threads = 0;
  ImageDecodeOptions decode;
};

/// torchvision's IMG_EXTENSIONS, matched case-insensitively at the end of a file name.
const std::vector<std::string>& image_folder_extensions();

/// The seed of one sample's random transform, from the batch seed and the sample index, so a
/// sample's pixels do not depend on which thread or batch part loads it.
uint64_t derive_sample_seed(uint64_t seed, int64_t index);

class ImageFolderDataset : public Dataset {
 public:
  /// Scans `root` (sorted class folders, each walked recursively following symlinks, files with
  /// an image extension in sorted path order as torchvision's ImageFolder lists them).
  static StatusOr<std::unique_ptr<ImageFolderDataset>> open(const std::string& root, const ImageFolderOptions& options);

  int64_t size() const override { return static_cast<int64_t>(samples_.size()); }
  std::vector<SampleInput> inputs() const override;
  int64_t num_classes() const override { return static_cast<int64_t>(classes_.size()); }
  std::vector<std::string> class_names() const override { return classes_; }
  /// Fills out->inputs with one [B, 3, S, S] float32 tensor and out->labels with int64 [B].
  Status load(const std::vector<int64_t>& indices, uint64_t seed, Batch* out) const override;

  /// Decodes and transforms sample `index` into `out` (3 * S * S floats); `label` receives its
  /// class (that of the replacement when a bad file was replaced).
  Status load_sample(int64_t index, uint64_t seed, std::span<float> out, int64_t* label) const;

  const std::string& path(int64_t index) const { return samples_[static_cast<size_t>(index)].path; }
  int64_t label(int64_t index) const { return samples_[static_cast<size_t>(index)].label; }

  /// Files left out at scan time (skip_bad_images) and the first few of them with the reason.
  int64_t skipped_files() const { return skipped_files_; }
  const std::vector<std::string>& skipped_examples() const { return skipped_examples_; }
  /// Loads that fell back to another sample because a file failed to decode (skip_bad_images),
  /// and the first few failures.
  int64_t replaced_samples() const { return replaced_.load(); }
  std::vector<std::string> replaced_examples() const;

 private:
  struct Sample {
    std::string path;
    int64_t label = 0;
  };
  ImageFolderDataset() = default;
  Status load_one(int64_t index, uint64_t seed, std::span<float> out) const;

  std::string root_;
  ImageFolderOptions options_;
  std::vector<std::string> classes_;
  std::vector<Sample> samples_;
  int64_t skipped_files_ = 0;
  std::vector<std::string> skipped_examples_;
  mutable std::atomic<int64_t> replaced_{0};
  mutable std::mutex replaced_mu_;
  mutable std::vector<std::string> replaced_examples_;
};

}  // namespace ferry
