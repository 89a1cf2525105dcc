// Helpers shared by the data tests: exception messages, a scratch folder
// with file writers, and an in-memory text dataset.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace baton {
namespace testing_util {

namespace fs = std::filesystem;

// Runs `fn` and returns the message of the E it throws (fails when none).
template <class E, class Fn>
std::string thrown_message(Fn&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return "";
}

// `text` gzip-compressed, in memory.
inline std::string gzip_bytes(const std::string& text) {
  z_stream stream{};
  EXPECT_EQ(
      deflateInit2(&stream, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY),
      Z_OK);
  std::string out(deflateBound(&stream, text.size()), '\0');
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  stream.avail_in = static_cast<uInt>(text.size());
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&stream, Z_FINISH), Z_STREAM_END);
  out.resize(stream.total_out);
  deflateEnd(&stream);
  return out;
}

// Documents held in memory, for loader tests that need exact contents.
class VectorDataset final : public TextDataset {
 public:
  explicit VectorDataset(std::vector<std::string> docs)
      : docs_(std::move(docs)) {}
  int64_t size() const override {
    return static_cast<int64_t>(docs_.size());
  }
  std::string text(int64_t index) const override {
    ++reads;
    return docs_.at(static_cast<size_t>(index));
  }
  mutable int reads = 0;

 private:
  std::vector<std::string> docs_;
};

// A scratch folder per test, removed afterwards.
class DataFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("baton_data_test_" + std::to_string(::getpid()) + "_" +
            info->test_suite_name() + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    fs::remove_all(dir_);
  }

  std::string write_plain(const std::string& name, const std::string& text) {
    const fs::path path = dir_ / name;
    fs::create_directories(path.parent_path());
    std::ofstream out(path, std::ios::binary);
    out << text;
    EXPECT_TRUE(out.good()) << path;
    return path.string();
  }

  std::string write_gz(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    gzFile file = gzopen(path.c_str(), "wb");
    EXPECT_NE(file, nullptr) << path;
    EXPECT_EQ(
        gzwrite(file, text.data(), static_cast<unsigned>(text.size())),
        static_cast<int>(text.size()));
    EXPECT_EQ(gzclose(file), Z_OK);
    return path;
  }

  // One JSON Lines object {"text": doc} per document.
  std::string write_jsonl(
      const std::string& name, const std::vector<std::string>& docs) {
    std::string content;
    for (const auto& doc : docs) {
      content += nlohmann::json({{"text", doc}}).dump() + "\n";
    }
    return write_plain(name, content);
  }

  fs::path dir_;
};

}  // namespace testing_util
}  // namespace baton
