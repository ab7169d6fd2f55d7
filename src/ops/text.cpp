// Text ops: StringNormalizer (opset 10) and TfIdfVectorizer (opset 9).
#include <algorithm>
#include <map>
#include <set>

#include "ops/op_util.h"

namespace ferry {
namespace {

using std::string;
using std::vector;

// ---- UTF-8 case mapping ---------------------------------------------------------------------
// Simple one-to-one mappings for ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic; other code
// points (and invalid UTF-8 bytes) are kept as they are.

uint32_t to_lower_cp(uint32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0x80) return c;
  if ((c >= 0xC0 && c <= 0xDE && c != 0xD7)) return c + 0x20;
  if (c == 0x178) return 0xFF;
  if ((c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177)) return (c % 2 == 0) ? c + 1 : c;
  if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c % 2 == 1) ? c + 1 : c;
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 0x20;
  if (c >= 0x410 && c <= 0x42F) return c + 0x20;
  if (c >= 0x400 && c <= 0x40F) return c + 0x50;
  return c;
}

uint32_t to_upper_cp(uint32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0x80) return c;
  if ((c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 0x20;
  if (c == 0xFF) return 0x178;
  if ((c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177)) return (c % 2 == 1) ? c - 1 : c;
  if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c % 2 == 0) ? c - 1 : c;
  if (c == 0x3C2) return 0x3A3;  // final sigma
  if (c >= 0x3B1 && c <= 0x3C9) return c - 0x20;
  if (c >= 0x430 && c <= 0x44F) return c - 0x20;
  if (c >= 0x450 && c <= 0x45F) return c - 0x50;
  return c;
}

void append_utf8(uint32_t c, string* out) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

string change_case(const string& s, bool upper) {
  string out;
  out.reserve(s.size());
  size_t i = 0;
  const auto* b = reinterpret_cast<const unsigned char*>(s.data());
  while (i < s.size()) {
    const unsigned char c0 = b[i];
    int len = 0;
    uint32_t cp = 0;
    if (c0 < 0x80) len = 1, cp = c0;
    else if ((c0 & 0xE0) == 0xC0) len = 2, cp = c0 & 0x1F;
    else if ((c0 & 0xF0) == 0xE0) len = 3, cp = c0 & 0x0F;
    else if ((c0 & 0xF8) == 0xF0) len = 4, cp = c0 & 0x07;
    bool ok = len > 0 && i + static_cast<size_t>(len) <= s.size();
    for (int k = 1; ok && k < len; ++k) {
      if ((b[i + k] & 0xC0) != 0x80) ok = false;
      else cp = (cp << 6) | (b[i + k] & 0x3F);
    }
    if (!ok) {  // not valid UTF-8: copy the byte
      out.push_back(static_cast<char>(c0));
      ++i;
      continue;
    }
    const uint32_t m = upper ? to_upper_cp(cp) : to_lower_cp(cp);
    if (m == cp) out.append(s, i, static_cast<size_t>(len));
    else append_utf8(m, &out);
    i += static_cast<size_t>(len);
  }
  return out;
}

// ---- StringNormalizer -----------------------------------------------------------------------

enum class CaseAction { kNone, kLower, kUpper };

template <class Ctx>
Status read_normalizer_attrs(Ctx& ctx, CaseAction* action, bool* case_sensitive) {
  const string a = ctx.get_string("case_change_action", "NONE");
  if (a == "NONE") *action = CaseAction::kNone;
  else if (a == "LOWER") *action = CaseAction::kLower;
  else if (a == "UPPER") *action = CaseAction::kUpper;
  else return ctx.error("attribute 'case_change_action' must be NONE, LOWER or UPPER, got '" + a + "'");
  const int64_t cs = ctx.get_int("is_case_sensitive", 0);
  if (cs != 0 && cs != 1) return ctx.error("attribute 'is_case_sensitive' must be 0 or 1, got " + std::to_string(cs));
  *case_sensitive = cs == 1;
  return Status::ok();
}

Status infer_string_normalizer(InferContext& ctx) {
  CaseAction action = CaseAction::kNone;
  bool cs = false;
  RETURN_IF_ERROR(read_normalizer_attrs(ctx, &action, &cs));
  const TensorType& x = ctx.input_type(0);
  if (x.dtype != DType::kUndefined && x.dtype != DType::kString) return ctx.error("input must be a string tensor");
  std::optional<Shape> out;
  if (x.shape) {
    const int64_t r = x.shape->rank();
    const Dim d0 = dim_or_unknown(x, 0);
    if (r != 1 && r != 2) return ctx.error("input must have shape [C] or [1, C], got " + x.shape->to_string());
    if (r == 2 && d0.is_known() && d0.value != 1) return ctx.error("input must have shape [C] or [1, C], got " + x.shape->to_string());
    Dim c = dim_or_unknown(x, r - 1);
    // Without stopwords nothing is removed (an empty input still gives one empty string).
    if (!(ctx.get_strings("stopwords").empty() && c.is_known() && c.value > 0)) c = Dim();
    out = r == 1 ? Shape({c}) : Shape({Dim(1), c});
  }
  ctx.set_output(0, TensorType{DType::kString, out});
  return Status::ok();
}

Status k_string_normalizer(KernelContext& ctx) {
  CaseAction action = CaseAction::kNone;
  bool cs = false;
  RETURN_IF_ERROR(read_normalizer_attrs(ctx, &action, &cs));
  const Tensor& x = ctx.input(0);
  if (x.dtype() != DType::kString) return ctx.error("input must be a string tensor");
  if (!(x.rank() == 1 || (x.rank() == 2 && x.dim(0) == 1)))
    return ctx.error("input must have shape [C] or [1, C], got " + dims_to_string(x.dims()));
  std::set<string> stop;
  for (const string& s : ctx.get_strings("stopwords")) stop.insert(cs ? s : change_case(s, false));
  vector<string> kept;
  for (const string& s : x.strings()) {
    if (!stop.empty() && stop.count(cs ? s : change_case(s, false))) continue;
    switch (action) {
      case CaseAction::kNone: kept.push_back(s); break;
      case CaseAction::kLower: kept.push_back(change_case(s, false)); break;
      case CaseAction::kUpper: kept.push_back(change_case(s, true)); break;
    }
  }
  if (kept.empty()) kept.emplace_back();  // all filtered: one empty string, as onnxruntime
  const int64_t c = static_cast<int64_t>(kept.size());
  ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DType::kString, x.rank() == 1 ? vector<int64_t>{c} : vector<int64_t>{1, c}));
  y->mutable_strings() = std::move(kept);
  return Status::ok();
}

// ---- TfIdfVectorizer ------------------------------------------------------------------------

enum class TfIdfMode { kTF, kIDF, kTFIDF };

struct TfIdfConfig {
  TfIdfMode mode = TfIdfMode::kTF;
  int64_t min_gram = 1, max_gram = 1, max_skip = 0;
  vector<int64_t> counts, indexes;
  vector<float> weights;
  vector<int64_t> pool_ints;
  vector<string> pool_strings;
  bool strings = false;
  int64_t output_size = 0;
};

template <class Ctx>
Status read_tfidf_config(Ctx& ctx, TfIdfConfig* c) {
  const string mode = ctx.get_string("mode", "");
  if (mode == "TF") c->mode = TfIdfMode::kTF;
  else if (mode == "IDF") c->mode = TfIdfMode::kIDF;
  else if (mode == "TFIDF") c->mode = TfIdfMode::kTFIDF;
  else return ctx.error("attribute 'mode' must be TF, IDF or TFIDF, got '" + mode + "'");
  for (const char* req : {"min_gram_length", "max_gram_length", "max_skip_count", "ngram_counts", "ngram_indexes"})
    if (!ctx.has(req)) return ctx.error(string("required attribute '") + req + "' is missing");
  c->min_gram = ctx.get_int("min_gram_length", 1);
  c->max_gram = ctx.get_int("max_gram_length", 1);
  c->max_skip = ctx.get_int("max_skip_count", 0);
  if (c->min_gram < 1 || c->max_gram < c->min_gram || c->max_gram > 1024)
    return ctx.error("attributes 'min_gram_length' (" + std::to_string(c->min_gram) + ") and 'max_gram_length' (" +
                     std::to_string(c->max_gram) + ") must satisfy 1 <= min <= max");
  if (c->max_skip < 0 || c->max_skip > (int64_t(1) << 20))
    return ctx.error("attribute 'max_skip_count' must be >= 0, got " + std::to_string(c->max_skip));
  c->counts = ctx.get_ints("ngram_counts");
  c->indexes = ctx.get_ints("ngram_indexes");
  c->weights = ctx.get_floats("weights");
  c->pool_ints = ctx.get_ints("pool_int64s");
  c->pool_strings = ctx.get_strings("pool_strings");
  const bool has_i = ctx.has("pool_int64s"), has_s = ctx.has("pool_strings");
  if (has_i == has_s) return ctx.error("exactly one of the attributes 'pool_int64s' and 'pool_strings' must be given");
  c->strings = has_s;
  const int64_t pool = static_cast<int64_t>(c->strings ? c->pool_strings.size() : c->pool_ints.size());
  if (c->indexes.empty()) return ctx.error("attribute 'ngram_indexes' must not be empty");
  for (int64_t v : c->indexes)
    if (v < 0 || v >= (int64_t(1) << 30)) return ctx.error("attribute 'ngram_indexes' has an out-of-range value " + std::to_string(v));
  c->output_size = *std::max_element(c->indexes.begin(), c->indexes.end()) + 1;
  if (!c->weights.empty() && c->weights.size() != c->indexes.size())
    return ctx.error("attribute 'weights' has " + std::to_string(c->weights.size()) + " values but 'ngram_indexes' has " +
                     std::to_string(c->indexes.size()));
  int64_t total = 0;
  for (size_t i = 0; i < c->counts.size(); ++i) {
    const int64_t start = c->counts[i];
    const int64_t end = i + 1 < c->counts.size() ? c->counts[i + 1] : pool;
    if (start < 0 || start > pool || end < start || end > pool)
      return ctx.error("attribute 'ngram_counts' " + dims_to_string(c->counts) + " is not a nondecreasing list of offsets into the pool of " +
                       std::to_string(pool));
    total += (end - start) / static_cast<int64_t>(i + 1);
  }
  if (total > static_cast<int64_t>(c->indexes.size()))
    return ctx.error("the pool holds " + std::to_string(total) + " n-grams but 'ngram_indexes' has only " +
                     std::to_string(c->indexes.size()) + " entries");
  return Status::ok();
}

Status infer_tfidf(InferContext& ctx) {
  TfIdfConfig c;
  RETURN_IF_ERROR(read_tfidf_config(ctx, &c));
  const TensorType& x = ctx.input_type(0);
  if (x.dtype != DType::kUndefined) {
    const bool is_str = x.dtype == DType::kString;
    if (is_str != c.strings || (!is_str && x.dtype != DType::kI32 && x.dtype != DType::kI64))
      return ctx.error(string("input of type ") + dtype_name(x.dtype) + " does not match the " +
                       (c.strings ? "string pool (expects a string input)" : "int64 pool (expects an int32 or int64 input)"));
  }
  std::optional<Shape> out;
  if (x.shape) {
    const int64_t r = x.shape->rank();
    if (r > 2) return ctx.error("input must have shape [C] or [B, C], got " + x.shape->to_string());
    out = r == 2 ? Shape({dim_or_unknown(x, 0), Dim(c.output_size)}) : Shape({Dim(c.output_size)});
  }
  ctx.set_output(0, TensorType{DType::kF32, out});
  return Status::ok();
}

template <typename K>
struct NgramTrie {
  struct Node {
    int64_t id = 0;  // 0: no n-gram ends here
    std::map<K, int64_t> children;
  };
  vector<Node> nodes = vector<Node>(1);

  int64_t child(int64_t n, const K& k) const {
    auto it = nodes[n].children.find(k);
    return it == nodes[n].children.end() ? -1 : it->second;
  }
  int64_t emplace(int64_t n, const K& k) {
    auto it = nodes[n].children.find(k);
    if (it != nodes[n].children.end()) return it->second;
    const int64_t id = static_cast<int64_t>(nodes.size());
    nodes[n].children.emplace(k, id);
    nodes.emplace_back();
    return id;
  }
};

// Builds the n-gram trie (ids from 1 in pool order, as onnxruntime) and counts every row.
template <typename K>
void tfidf_count(const TfIdfConfig& c, const vector<K>& pool, const vector<K>& x, int64_t rows, int64_t cols,
                 vector<int64_t>* freq) {
  NgramTrie<K> trie;
  int64_t ngram_id = 1;
  const int64_t pool_size = static_cast<int64_t>(pool.size());
  for (size_t i = 0; i < c.counts.size(); ++i) {
    const int64_t gram = static_cast<int64_t>(i) + 1;
    const int64_t start = c.counts[i];
    const int64_t end = i + 1 < c.counts.size() ? c.counts[i + 1] : pool_size;
    const int64_t ngrams = (end - start) / gram;
    if (ngrams <= 0) continue;
    if (gram < c.min_gram || gram > c.max_gram) {
      ngram_id += ngrams;
      continue;
    }
    int64_t p = start;
    for (int64_t g = 0; g < ngrams; ++g) {
      int64_t node = 0;
      for (int64_t k = 0; k < gram; ++k) node = trie.emplace(node, pool[p++]);
      trie.nodes[node].id = ngram_id++;
    }
  }
  for (int64_t row = 0; row < rows; ++row) {
    const K* xr = x.data() + row * cols;
    int64_t* fr = freq->data() + row * c.output_size;
    int64_t start_size = c.min_gram;
    for (int64_t skip = 1; skip <= c.max_skip + 1; ++skip) {
      for (int64_t s = 0; s < cols; ++s) {
        if (s + skip * (start_size - 1) >= cols) break;  // no n-gram of the smallest size fits
        int64_t node = 0, size = 1, item = s;
        while (!trie.nodes[node].children.empty() && size <= c.max_gram && item < cols) {
          const int64_t nx = trie.child(node, xr[item]);
          if (nx < 0) break;
          const int64_t id = trie.nodes[nx].id;
          if (size >= start_size && id != 0) ++fr[c.indexes[id - 1]];
          node = nx;
          ++size;
          item += skip;
        }
      }
      // Unigrams are counted once: they do not depend on the skip distance.
      if (start_size == 1) {
        ++start_size;
        if (start_size > c.max_gram) break;
      }
    }
  }
}

Status k_tfidf(KernelContext& ctx) {
  TfIdfConfig c;
  RETURN_IF_ERROR(read_tfidf_config(ctx, &c));
  const Tensor& x = ctx.input(0);
  const bool is_str = x.dtype() == DType::kString;
  if (is_str != c.strings || (!is_str && x.dtype() != DType::kI32 && x.dtype() != DType::kI64))
    return ctx.error(string("input of type ") + dtype_name(x.dtype()) + " does not match the " +
                     (c.strings ? "string pool (expects a string input)" : "int64 pool (expects an int32 or int64 input)"));
  if (x.rank() > 2) return ctx.error("input must have shape [C] or [B, C], got " + dims_to_string(x.dims()));
  const int64_t rows = x.rank() == 2 ? x.dim(0) : 1;
  const int64_t cols = x.rank() == 2 ? x.dim(1) : x.numel();
  vector<int64_t> out_dims = x.rank() == 2 ? vector<int64_t>{rows, c.output_size} : vector<int64_t>{c.output_size};
  ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DType::kF32, out_dims));
  vector<int64_t> freq(static_cast<size_t>(rows * c.output_size), 0);
  if (c.strings) {
    tfidf_count<string>(c, c.pool_strings, x.strings(), rows, cols, &freq);
  } else {
    vector<int64_t> xv = x.to_int64_vector();
    tfidf_count<int64_t>(c, c.pool_ints, xv, rows, cols, &freq);
  }
  // Weight of each output column: weights[i] applies to n-gram i, i.e. column ngram_indexes[i]
  // (1 where no weight is given).
  vector<double> w(static_cast<size_t>(c.output_size), 1.0);
  for (size_t i = 0; i < c.weights.size(); ++i) w[c.indexes[i]] = c.weights[i];
  float* py = y->mutable_data<float>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < c.output_size; ++j) {
      const int64_t f = freq[r * c.output_size + j];
      double v = 0.0;
      switch (c.mode) {
        case TfIdfMode::kTF: v = static_cast<double>(f); break;
        case TfIdfMode::kIDF: v = f > 0 ? w[j] : 0.0; break;
        case TfIdfMode::kTFIDF: v = w[j] * static_cast<double>(f); break;
      }
      py[r * c.output_size + j] = static_cast<float>(v);
    }
  return Status::ok();
}

}  // namespace

void register_text_ops(OpRegistry& r) {
  r.add(OpSchema{.name = "StringNormalizer", .since_version = 10,
                 .attrs = {{"case_change_action", AttrType::kString}, {"is_case_sensitive", AttrType::kInt},
                           {"locale", AttrType::kString}, {"stopwords", AttrType::kStrings}},
                 .types = {DType::kString}, .infer = infer_string_normalizer, .kernel = k_string_normalizer});
  r.add(OpSchema{.name = "TfIdfVectorizer", .since_version = 9,
                 .attrs = {{"max_gram_length", AttrType::kInt, true}, {"max_skip_count", AttrType::kInt, true},
                           {"min_gram_length", AttrType::kInt, true}, {"mode", AttrType::kString, true},
                           {"ngram_counts", AttrType::kInts, true}, {"ngram_indexes", AttrType::kInts, true},
                           {"pool_int64s", AttrType::kInts}, {"pool_strings", AttrType::kStrings},
                           {"weights", AttrType::kFloats}},
                 .types = {DType::kString, DType::kI32, DType::kI64}, .infer = infer_tfidf, .kernel = k_tfidf});
}

}  // namespace ferry
