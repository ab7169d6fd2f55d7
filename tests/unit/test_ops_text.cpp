#include "op_tester.h"

namespace ferry::testing {
namespace {

using Strs = std::vector<std::string>;
Tensor S_(const Strs& v, std::vector<int64_t> dims) { return Tensor::from_vector<std::string>(v, std::move(dims)); }
Tensor I32_(const std::vector<int32_t>& v, std::vector<int64_t> dims) { return Tensor::from_vector<int32_t>(v, std::move(dims)); }

// ---- StringNormalizer ----

TEST(StringNormalizer, CaseSensitiveStopwordsAndUpper) {
  auto out = OpTester("StringNormalizer", 10)
                 .attr("case_change_action", "UPPER").attr("is_case_sensitive", 1).attr("stopwords", Strs{"monday"})
                 .input(S_({"monday", "Monday", "tuesday"}, {3})).run();
  EXPECT_EQ(out[0].strings(), (Strs{"MONDAY", "TUESDAY"}));
}

TEST(StringNormalizer, CaseInsensitiveTwoDim) {
  auto out = OpTester("StringNormalizer", 10)
                 .attr("case_change_action", "LOWER").attr("stopwords", Strs{"MONDAY"})
                 .input(S_({"Monday", "TUESDAY", "monday", "Wed"}, {1, 4})).run();
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(out[0].strings(), (Strs{"tuesday", "wed"}));
}

TEST(StringNormalizer, AllFilteredGivesOneEmptyString) {
  auto out = OpTester("StringNormalizer", 10).attr("is_case_sensitive", 1).attr("stopwords", Strs{"a"})
                 .input(S_({"a", "a"}, {2})).run();
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{1}));
  EXPECT_EQ(out[0].strings(), (Strs{""}));
  auto two = OpTester("StringNormalizer", 10).attr("stopwords", Strs{"a"}).input(S_({"A"}, {1, 1})).run();
  EXPECT_EQ(two[0].dims(), (std::vector<int64_t>{1, 1}));
}

TEST(StringNormalizer, Utf8CaseMapping) {
  auto up = OpTester("StringNormalizer", 10).attr("case_change_action", "UPPER")
                .input(S_({"\xc3\xa4rger stra\xc3\x9f" "e", "\xd0\xbf\xd1\x80\xd0\xb8", "\xce\xb1\xce\xb2"}, {3})).run();
  EXPECT_EQ(up[0].strings(), (Strs{"\xc3\x84RGER STRA\xc3\x9f" "E", "\xd0\x9f\xd0\xa0\xd0\x98", "\xce\x91\xce\x92"}));
  auto low = OpTester("StringNormalizer", 10).attr("case_change_action", "LOWER").input(S_({"\xc3\x84" "Bc\xff"}, {1})).run();
  EXPECT_EQ(low[0].strings(), (Strs{"\xc3\xa4" "bc\xff"}));  // the invalid byte is kept
}

TEST(StringNormalizer, BadInputsAreErrors) {
  EXPECT_FALSE(OpTester("StringNormalizer", 10).input(S_({"a", "b", "c", "d"}, {2, 2})).run_status().is_ok());
  EXPECT_FALSE(OpTester("StringNormalizer", 10).attr("case_change_action", "TITLE").input(S_({"a"}, {1})).run_status().is_ok());
  EXPECT_FALSE(OpTester("StringNormalizer", 10).input(I64_({1}, {1})).run_status().is_ok());
}

// ---- TfIdfVectorizer ----

OpTester tfidf(const char* mode, int64_t min_gram, int64_t max_gram, int64_t skip) {
  OpTester t("TfIdfVectorizer", 9);
  t.attr("mode", mode).attr("min_gram_length", min_gram).attr("max_gram_length", max_gram).attr("max_skip_count", skip)
      .attr("ngram_counts", std::vector<int64_t>{0, 4}).attr("ngram_indexes", std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6})
      .attr("pool_int64s", std::vector<int64_t>{2, 3, 5, 4, 5, 6, 7, 8, 6, 7});
  return t;
}

TEST(TfIdfVectorizer, UniAndBigramsWithSkips) {
  auto out = tfidf("TF", 1, 2, 5).input(I32_({1, 1, 3, 3, 3, 7, 8, 6, 7, 5, 6, 8}, {2, 6})).run();
  expect_near(out[0], T_({0, 3, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 1, 1}, {2, 7}));
}

TEST(TfIdfVectorizer, OnlyBigramsNoSkip) {
  auto out = tfidf("TF", 2, 2, 0).input(I64_({1, 1, 3, 3, 3, 7, 8, 6, 7, 5, 6, 8}, {12})).run();
  expect_near(out[0], T_({0, 0, 0, 0, 1, 1, 1}, {7}));
  auto skip5 = tfidf("TF", 2, 2, 5).input(I64_({1, 1, 3, 3, 3, 7, 8, 6, 7, 5, 6, 8}, {12})).run();
  expect_near(skip5[0], T_({0, 0, 0, 0, 1, 3, 1}, {7}));
}

TEST(TfIdfVectorizer, IdfAndTfIdfWeights) {
  std::vector<float> w = {1, 2, 3, 4, 5, 6, 7};
  auto idf = tfidf("IDF", 1, 2, 5).attr("weights", w).input(I64_({1, 1, 3, 3, 3, 7, 8, 6, 7, 5, 6, 8}, {2, 6})).run();
  expect_near(idf[0], T_({0, 2, 0, 0, 0, 0, 0, 0, 0, 3, 0, 5, 6, 7}, {2, 7}), 1e-6);
  auto tfidf_w = tfidf("TFIDF", 1, 2, 5).attr("weights", w).input(I64_({1, 1, 3, 3, 3, 7, 8, 6, 7, 5, 6, 8}, {2, 6})).run();
  expect_near(tfidf_w[0], T_({0, 6, 0, 0, 0, 0, 0, 0, 0, 3, 0, 5, 6, 7}, {2, 7}), 1e-6);
  auto idf_plain = tfidf("IDF", 1, 1, 0).input(I64_({3, 3, 5}, {3})).run();
  expect_near(idf_plain[0], T_({0, 1, 1, 0, 0, 0, 0}, {7}));
}

TEST(TfIdfVectorizer, StringPool) {
  OpTester t("TfIdfVectorizer", 9);
  t.attr("mode", "TF").attr("min_gram_length", 1).attr("max_gram_length", 2).attr("max_skip_count", 0)
      .attr("ngram_counts", std::vector<int64_t>{0, 2}).attr("ngram_indexes", std::vector<int64_t>{0, 1, 2})
      .attr("pool_strings", Strs{"a", "b", "a", "b"});
  auto out = t.input(S_({"a", "b", "a", "b", "c"}, {5})).run();
  expect_near(out[0], T_({2, 2, 2}, {3}));
}

TEST(TfIdfVectorizer, BadConfigurationsAreErrors) {
  EXPECT_FALSE(tfidf("TF", 1, 2, 0).input(S_({"a"}, {1})).run_status().is_ok());       // string input, int pool
  EXPECT_FALSE(tfidf("BM25", 1, 2, 0).input(I64_({1}, {1})).run_status().is_ok());      // bad mode
  EXPECT_FALSE(tfidf("TF", 3, 2, 0).input(I64_({1}, {1})).run_status().is_ok());        // min > max
  EXPECT_FALSE(tfidf("TF", 1, 2, 0).input(I64_({1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2})).run_status().is_ok());
  OpTester few("TfIdfVectorizer", 9);
  few.attr("mode", "TF").attr("min_gram_length", 1).attr("max_gram_length", 1).attr("max_skip_count", 0)
      .attr("ngram_counts", std::vector<int64_t>{0}).attr("ngram_indexes", std::vector<int64_t>{0})
      .attr("pool_int64s", std::vector<int64_t>{1, 2});
  EXPECT_FALSE(few.input(I64_({1, 2}, {2})).run_status().is_ok());  // two unigrams, one index
}

}  // namespace
}  // namespace ferry::testing
