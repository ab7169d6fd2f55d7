// ImageFolder scanning and loading (see image_folder.h).
#include "data/image_folder.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>
#include <thread>
#include <utility>

#include "common/splitmix64.h"
#include "io/image_transform.h"

namespace ferry {
namespace fs = std::filesystem;

namespace {

constexpr int kMaxFolderDepth = 64;
constexpr size_t kMaxExamples = 5;
constexpr int kReplacementTries = 8;

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool has_image_extension(const std::string& name) {
  const std::string l = lower(name);
  for (const std::string& ext : image_folder_extensions()) {
    if (l.size() >= ext.size() && l.compare(l.size() - ext.size(), ext.size(), ext) == 0) return true;
  }
  return false;
}

bool decodable_extension(const std::string& name) {
  const std::string l = lower(name);
  for (const char* ext : {".jpg", ".jpeg", ".png"}) {
    const size_t n = std::strlen(ext);
    if (l.size() >= n && l.compare(l.size() - n, n, ext) == 0) return true;
  }
  return false;
}

struct DirListing {
  std::string dir;
  std::vector<std::string> files;
};

// os.walk(top, followlinks=True): every folder with its non-folder entries. A folder that is its
// own ancestor (a symlink cycle, where os.walk would never end) is not entered again.
Status walk(const fs::path& dir, int depth, std::set<std::pair<dev_t, ino_t>>* ancestors, std::vector<DirListing>* out) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return Status::ok();  // vanished or broken link
  const std::pair<dev_t, ino_t> id{st.st_dev, st.st_ino};
  if (!ancestors->insert(id).second) return Status::ok();
  struct Leave {
    std::set<std::pair<dev_t, ino_t>>* set;
    std::pair<dev_t, ino_t> id;
    ~Leave() { set->erase(id); }
  } leave{ancestors, id};
  if (depth > kMaxFolderDepth) {
    return invalid_argument("'" + dir.string() + "': folders nested deeper than " + std::to_string(kMaxFolderDepth) +
                            " levels in an ImageFolder");
  }
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) return invalid_argument("'" + dir.string() + "': cannot list the folder: " + ec.message());
  DirListing listing{dir.string(), {}};
  std::vector<std::string> subdirs;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) break;
    std::error_code dir_ec;
    const bool is_dir = it->is_directory(dir_ec);  // follows symlinks, like os.walk's is_dir()
    std::string name = it->path().filename().string();
    (is_dir ? subdirs : listing.files).push_back(std::move(name));
  }
  if (ec) return invalid_argument("'" + dir.string() + "': cannot list the folder: " + ec.message());
  out->push_back(std::move(listing));
  std::sort(subdirs.begin(), subdirs.end());
  for (const std::string& s : subdirs) RETURN_IF_ERROR(walk(dir / s, depth + 1, ancestors, out));
  return Status::ok();
}

std::string join_names(const std::vector<std::string>& names, size_t max_names) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < max_names; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > max_names) s += ", ... (" + std::to_string(names.size()) + " in all)";
  return s;
}

}  // namespace

const std::vector<std::string>& image_folder_extensions() {
  static const std::vector<std::string> kExtensions = {".jpg", ".jpeg", ".png", ".ppm", ".bmp",
                                                       ".pgm", ".tif",  ".tiff", ".webp"};
  return kExtensions;
}

uint64_t derive_sample_seed(uint64_t seed, int64_t index) {
  return splitmix64(seed ^ splitmix64(static_cast<uint64_t>(index)));
}

StatusOr<std::unique_ptr<ImageFolderDataset>> ImageFolderDataset::open(const std::string& root,
                                                                       const ImageFolderOptions& options) {
  if (options.image_size < 1 || options.image_size > 16384) {
    return invalid_argument("image size " + std::to_string(options.image_size) + " is out of range (1..16384)");
  }
  std::error_code ec;
  if (!fs::exists(root, ec)) return not_found("'" + root + "': no such data folder");
  if (!fs::is_directory(root, ec)) {
    return invalid_argument("'" + root + "' is not a folder; an ImageFolder data set is a folder with one "
                            "subfolder per class (or pass a .npz file)");
  }
  std::unique_ptr<ImageFolderDataset> ds(new ImageFolderDataset());
  ds->root_ = root;
  ds->options_ = options;

  fs::directory_iterator it(root, ec);
  if (ec) return invalid_argument("'" + root + "': cannot list the folder: " + ec.message());
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) return invalid_argument("'" + root + "': cannot list the folder: " + ec.message());
    std::error_code dir_ec;
    if (it->is_directory(dir_ec)) ds->classes_.push_back(it->path().filename().string());
  }
  std::sort(ds->classes_.begin(), ds->classes_.end());
  if (ds->classes_.empty()) {
    return invalid_argument("'" + root + "': no class folders found; an ImageFolder data set holds one subfolder "
                            "per class (ROOT/cat/1.jpg, ROOT/dog/2.jpg, ...)");
  }

  std::vector<std::string> undecodable;  // image extensions ferry cannot decode (.bmp, .webp, ...)
  for (size_t c = 0; c < ds->classes_.size(); ++c) {
    std::vector<DirListing> listings;
    std::set<std::pair<dev_t, ino_t>> ancestors;
    RETURN_IF_ERROR(walk(fs::path(root) / ds->classes_[c], 0, &ancestors, &listings));
    std::sort(listings.begin(), listings.end(),
              [](const DirListing& a, const DirListing& b) { return a.dir < b.dir; });
    for (DirListing& l : listings) {
      std::sort(l.files.begin(), l.files.end());
      for (const std::string& f : l.files) {
        std::string p = (fs::path(l.dir) / f).string();
        if (!has_image_extension(p)) continue;
        if (!decodable_extension(p)) {
          undecodable.push_back(p);
          if (options.skip_bad_images) continue;
        }
        ds->samples_.push_back(Sample{std::move(p), static_cast<int64_t>(c)});
      }
    }
  }
  if (!undecodable.empty() && !options.skip_bad_images) {
    return invalid_argument("'" + root + "': " + std::to_string(undecodable.size()) +
                            " images are in formats ferry does not decode (" + join_names(undecodable, 3) +
                            "); ferry decodes JPEG and PNG: convert them, or skip them with the "
                            "skip-bad-images option");
  }
  ds->skipped_files_ = static_cast<int64_t>(undecodable.size());
  for (size_t i = 0; i < undecodable.size() && i < kMaxExamples; ++i) {
    ds->skipped_examples_.push_back("'" + undecodable[i] + "': not JPEG or PNG");
  }

  if (options.skip_bad_images && !ds->samples_.empty()) {
    // Probe every header in parallel; drop the files that fail.
    std::vector<Status> probe(ds->samples_.size());
    int threads = options.scan_threads > 0 ? options.scan_threads
                                           : static_cast<int>(std::min(8u, std::max(1u, std::thread::hardware_concurrency())));
    threads = static_cast<int>(std::min<size_t>(static_cast<size_t>(threads), ds->samples_.size()));
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t]() {
        for (size_t i = static_cast<size_t>(t); i < ds->samples_.size(); i += static_cast<size_t>(threads)) {
          probe[i] = probe_image_file(ds->samples_[i].path, options.decode).status();
        }
      });
    }
    for (std::thread& th : pool) th.join();
    std::vector<Sample> kept;
    for (size_t i = 0; i < ds->samples_.size(); ++i) {
      if (probe[i].is_ok()) {
        kept.push_back(std::move(ds->samples_[i]));
      } else {
        ++ds->skipped_files_;
        if (ds->skipped_examples_.size() < kMaxExamples) ds->skipped_examples_.push_back(probe[i].message());
      }
    }
    ds->samples_ = std::move(kept);
  }

  std::vector<bool> has_sample(ds->classes_.size(), false);
  for (const Sample& s : ds->samples_) has_sample[static_cast<size_t>(s.label)] = true;
  std::vector<std::string> empty;
  for (size_t c = 0; c < ds->classes_.size(); ++c) {
    if (!has_sample[c]) empty.push_back(ds->classes_[c]);
  }
  if (!empty.empty()) {
    std::string exts;
    for (const std::string& e : image_folder_extensions()) exts += (exts.empty() ? "" : " ") + e;
    return invalid_argument("'" + root + "': no usable image in the class folders " + join_names(empty, 5) +
                            " (image extensions: " + exts + "); every class folder needs at least one image" +
                            (ds->skipped_files_ > 0 ? " (" + std::to_string(ds->skipped_files_) + " bad files skipped)" : ""));
  }
  return ds;
}

std::vector<SampleInput> ImageFolderDataset::inputs() const {
  return {SampleInput{options_.input_name, DType::kF32, {3, options_.image_size, options_.image_size}}};
}

std::vector<std::string> ImageFolderDataset::replaced_examples() const {
  std::lock_guard<std::mutex> lock(replaced_mu_);
  return replaced_examples_;
}

Status ImageFolderDataset::load_one(int64_t index, uint64_t seed, std::span<float> out) const {
  ASSIGN_OR_RETURN(Image img, read_image(path(index), options_.decode));
  const int64_t s = options_.image_size;
  if (options_.train) {
    std::mt19937_64 rng(derive_sample_seed(seed, index));
    img = train_transform(img, s, rng);
  } else {
    img = eval_transform(img, s);
  }
  to_normalized_chw(img, out);
  return Status::ok();
}

Status ImageFolderDataset::load_sample(int64_t index, uint64_t seed, std::span<float> out, int64_t* label) const {
  if (index < 0 || index >= size()) {
    return invalid_argument("sample index " + std::to_string(index) + " is out of range: '" + root_ + "' has " +
                            std::to_string(size()) + " images");
  }
  if (static_cast<int64_t>(out.size()) != 3 * options_.image_size * options_.image_size) {
    return internal_error("load_sample: output span has the wrong size");
  }
  Status st = load_one(index, seed, out);
  *label = this->label(index);
  if (st.is_ok() || !options_.skip_bad_images) return st;
  // A file that passed the header probe but fails to decode: use the next sample that decodes.
  replaced_.fetch_add(1);
  {
    std::lock_guard<std::mutex> lock(replaced_mu_);
    if (replaced_examples_.size() < kMaxExamples) replaced_examples_.push_back(st.message());
  }
  for (int k = 1; k <= kReplacementTries && k < size(); ++k) {
    const int64_t alt = (index + k) % size();
    if (load_one(alt, seed, out).is_ok()) {
      *label = this->label(alt);
      return Status::ok();
    }
  }
  return st.with_context("no decodable image among the " + std::to_string(kReplacementTries) +
                         " samples after it either");
}

Status ImageFolderDataset::load(const std::vector<int64_t>& indices, uint64_t seed, Batch* out) const {
  const int64_t b = static_cast<int64_t>(indices.size());
  const int64_t s = options_.image_size;
  ASSIGN_OR_RETURN(Tensor images, Tensor::create(DType::kF32, {b, 3, s, s}, "image batch"));
  Tensor labels = Tensor::allocate(DType::kI64, {b});
  const int64_t per_sample = 3 * s * s;
  for (int64_t i = 0; i < b; ++i) {
    std::span<float> dst(images.mutable_data<float>() + i * per_sample, static_cast<size_t>(per_sample));
    RETURN_IF_ERROR(load_sample(indices[static_cast<size_t>(i)], seed, dst, &labels.mutable_data<int64_t>()[i]));
  }
  out->inputs.clear();
  out->inputs.emplace_back(options_.input_name, std::move(images));
  out->labels = std::move(labels);
  out->indices = indices;
  return Status::ok();
}

}  // namespace ferry
