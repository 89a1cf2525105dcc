// The safetensors writer and reader: round trips, the byte layout checked by
// an independent parse of the file, and every malformed-file error.

#include "checkpoint/safetensors.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace baton {
namespace {

std::string temp_file(const std::string& name) {
  return (std::filesystem::path(::testing::TempDir()) / name).string();
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

/// A file whose header is `header` (padded to 8) followed by `data_size`
/// zero bytes.
std::string handmade(
    const std::string& name, const std::string& header, size_t data_size) {
  std::string h = header;
  h.append((8 - h.size() % 8) % 8, ' ');
  const uint64_t n = h.size();
  std::string bytes(reinterpret_cast<const char*>(&n), 8);
  bytes += h + std::string(data_size, '\0');
  const auto path = temp_file(name);
  write_bytes(path, bytes);
  return path;
}

std::string error_of(const std::string& path) {
  try {
    SafetensorsReader reader(path);
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "";
}

TEST(Safetensors, RoundTripsEveryDtypeAndShape) {
  torch::manual_seed(0);
  const std::vector<std::pair<std::string, at::Tensor>> tensors = {
      {"f64", torch::randn({3, 2}, torch::kDouble)},
      {"f32", torch::randn({4, 5})},
      {"f16", torch::randn({7}).to(torch::kHalf)},
      {"bf16", torch::randn({2, 3, 2}).to(torch::kBFloat16)},
      {"i64", torch::randint(-1000, 1000, {5}, torch::kLong)},
      {"i32", torch::randint(-1000, 1000, {5}, torch::kInt)},
      {"i16", torch::randint(-1000, 1000, {5}, torch::kShort)},
      {"i8", torch::randint(-100, 100, {5}, torch::kChar)},
      {"u8", torch::randint(0, 255, {5}, torch::kByte)},
      {"bool", torch::rand({6}) > 0.5},
      {"scalar", torch::scalar_tensor(42, torch::kLong)},
      {"empty", torch::zeros({0, 3})},
      // Not contiguous: written as its values in row-major order.
      {"transposed", torch::arange(6, torch::kFloat).view({2, 3}).t()},
  };
  std::vector<SafetensorsItem> items;
  for (const auto& [name, t] : tensors) {
    items.push_back(safetensors_item(name, t));
  }
  SafetensorsWriteOptions options;
  options.metadata = {{"format", "pt"}, {"step", "7"}};
  const auto path = temp_file("roundtrip.safetensors");
  const auto entries = write_safetensors(path, items, options);
  ASSERT_EQ(entries.size(), tensors.size());

  const SafetensorsReader reader(path);
  EXPECT_EQ(reader.metadata(), options.metadata);
  EXPECT_EQ(reader.entries().size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, t] = tensors[i];
    const at::Tensor back = reader.read(name);
    EXPECT_EQ(back.scalar_type(), t.scalar_type()) << name;
    EXPECT_EQ(back.sizes(), t.sizes()) << name;
    EXPECT_TRUE(torch::equal(back, t)) << name;
    const auto* e = reader.find(name);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->begin, entries[i].begin);
    EXPECT_EQ(
        entries[i].crc32,
        crc32_of(t.contiguous().data_ptr(), t.numel() * t.element_size()));
  }
  EXPECT_EQ(reader.find("absent"), nullptr);
  EXPECT_THROW(reader.read("absent"), CheckpointError);
}

TEST(Safetensors, BytesFollowTheFormat) {
  // Parsed here by hand, independently of SafetensorsReader.
  const at::Tensor a = torch::tensor({1.5f, -2.0f, 3.25f});
  const at::Tensor b = torch::tensor({7, 8}, torch::kLong);
  const auto path = temp_file("layout.safetensors");
  write_safetensors(
      path, {safetensors_item("a", a), safetensors_item("b.weight", b)});
  const std::string bytes = read_bytes(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  ASSERT_EQ(bytes.size(), 8 + n + 12 + 16);
  const std::string header = bytes.substr(8, n);
  // The JSON, then only spaces up to the 8-byte boundary.
  EXPECT_EQ(header.find_last_not_of(' '), header.rfind('}'));
  const auto j = nlohmann::json::parse(header);
  EXPECT_EQ(j["a"]["dtype"], "F32");
  EXPECT_EQ(j["a"]["shape"], nlohmann::json({3}));
  EXPECT_EQ(j["a"]["data_offsets"], nlohmann::json({0, 12}));
  EXPECT_EQ(j["b.weight"]["dtype"], "I64");
  EXPECT_EQ(j["b.weight"]["data_offsets"], nlohmann::json({12, 28}));
  EXPECT_FALSE(j.contains("__metadata__"));
  float first = 0;
  int64_t last = 0;
  std::memcpy(&first, bytes.data() + 8 + n, 4);
  std::memcpy(&last, bytes.data() + 8 + n + 12 + 8, 8);
  EXPECT_EQ(first, 1.5f);
  EXPECT_EQ(last, 8);
}

TEST(Safetensors, Crc32IsZlibs) {
  const char* check = "123456789";
  EXPECT_EQ(crc32_of(check, 9), 0xCBF43926u);
  // Continuing a running CRC gives the CRC of the whole.
  EXPECT_EQ(crc32_of(check + 4, 5, crc32_of(check, 4)), 0xCBF43926u);
}

TEST(Safetensors, DtypeNames) {
  EXPECT_EQ(safetensors_dtype(at::kBFloat16), "BF16");
  EXPECT_EQ(dtype_from_safetensors("I64"), at::kLong);
  EXPECT_THROW(dtype_from_safetensors("F8_E4M3"), std::invalid_argument);
  EXPECT_THROW(safetensors_dtype(at::kComplexFloat), std::invalid_argument);
}

TEST(Safetensors, WriterChecksWhatItemsDeclare) {
  SafetensorsItem item{"x", at::kFloat, {2}, [] { return torch::zeros({3}); }};
  EXPECT_THROW(
      write_safetensors(temp_file("declared.safetensors"), {item}),
      std::invalid_argument);
  EXPECT_THROW(
      write_safetensors(
          temp_file("twice.safetensors"),
          {safetensors_item("x", torch::zeros({1})),
           safetensors_item("x", torch::zeros({1}))}),
      std::invalid_argument);
  EXPECT_THROW(
      write_safetensors("/nonexistent/folder/x.safetensors", {}),
      CheckpointError);
}

TEST(Safetensors, TruncatedFilesNameTheTensor) {
  const auto path = temp_file("truncated.safetensors");
  write_safetensors(
      path,
      {safetensors_item("first", torch::ones({4})),
       safetensors_item("second", torch::ones({4}))});
  std::string bytes = read_bytes(path);
  write_bytes(path, bytes.substr(0, bytes.size() - 1));
  const std::string e = error_of(path);
  EXPECT_NE(e.find(path), std::string::npos) << e;
  EXPECT_NE(e.find("truncated: tensor 'second'"), std::string::npos) << e;
  write_bytes(path, bytes.substr(0, 5));
  EXPECT_NE(error_of(path).find("truncated"), std::string::npos);
  write_bytes(path, bytes.substr(0, 20));
  EXPECT_NE(error_of(path).find("truncated"), std::string::npos);
  // A length no header has: refused before allocating it.
  const uint64_t huge = uint64_t{1} << 40;
  write_bytes(
      path,
      std::string(reinterpret_cast<const char*>(&huge), 8) +
          std::string(64, ' '));
  EXPECT_NE(
      error_of(path).find("exceeds the format's limit of 100 MiB"),
      std::string::npos);
  EXPECT_NE(
      error_of(temp_file("no_such.safetensors")).find("cannot open"),
      std::string::npos);
}

TEST(Safetensors, MalformedHeadersAreRejected) {
  const std::pair<std::string, std::string> cases[] = {
      {"{not json", "not valid JSON"},
      {"[1, 2]", "not a JSON object"},
      {R"({"x": {"dtype": "F99", "shape": [1], "data_offsets": [0, 4]}})",
       "tensor 'x': bad header entry: [safetensors] unknown dtype 'F99'"},
      {R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})",
       "tensor 'x': data_offsets [0, 4) do not hold 8 bytes for F32 [2]"},
      {R"({"x": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})",
       "tensor 'x': negative dimension"},
      {R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
       R"( "y": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
       "tensors 'x' and 'y' overlap"},
      {R"({"__metadata__": {"a": 1}})", "__metadata__ must map strings"},
      {R"({"x": {"dtype": "F64", "shape": [4294967296, 4294967296],)"
       R"( "data_offsets": [0, 8]}})",
       "tensor 'x': shape too large"},
  };
  for (const auto& [header, message] : cases) {
    const auto path = handmade("bad.safetensors", header, 8);
    const std::string e = error_of(path);
    EXPECT_NE(e.find(message), std::string::npos) << header << " -> " << e;
    EXPECT_NE(e.find(path), std::string::npos) << e;
  }
}

}  // namespace
}  // namespace baton
