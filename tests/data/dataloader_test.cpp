#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "data/dataloader.h"
#include "data/text_dataset.h"
#include "data/tiktoken_tokenizer.h"
#include "data/token_shards.h"
#include "tests/data/data_test_util.h"

namespace baton {
namespace {

using testing_util::DataFilesTest;
using testing_util::thrown_message;
using testing_util::VectorDataset;

constexpr int32_t kBos = 256;
constexpr int32_t kEos = 257;

std::vector<int64_t> row(const at::Tensor& t, int64_t b) {
  const at::Tensor r = t[b].contiguous();
  return std::vector<int64_t>(
      r.data_ptr<int64_t>(), r.data_ptr<int64_t>() + r.numel());
}

std::shared_ptr<const Tokenizer> bytes() {
  return std::make_shared<ByteTokenizer>();
}

std::unique_ptr<Dataset> docs(std::vector<std::string> texts) {
  return std::make_unique<VectorDataset>(std::move(texts));
}

DataLoaderOptions options(
    int64_t batch,
    int64_t seq,
    int64_t prefetch,
    int64_t dp_rank = 0,
    int64_t dp_size = 1,
    bool shuffle = false) {
  DataLoaderOptions o(batch, seq);
  o.prefetch = prefetch;
  o.dp_rank = dp_rank;
  o.dp_size = dp_size;
  o.shuffle = shuffle;
  o.seed = 1234;
  return o;
}

// `n` batches as one flat list of (inputs, labels) values, for equality.
std::vector<int64_t> take(DataLoader& loader, int n) {
  std::vector<int64_t> values;
  for (int i = 0; i < n; ++i) {
    const Batch batch = loader.next();
    EXPECT_EQ(batch.inputs.scalar_type(), at::kLong);
    for (const at::Tensor& t : {batch.inputs, batch.labels}) {
      const at::Tensor c = t.contiguous();
      values.insert(
          values.end(),
          c.data_ptr<int64_t>(),
          c.data_ptr<int64_t>() + c.numel());
    }
  }
  return values;
}

// Short documents "d0", "d1.", "d2..", ... of different lengths.
std::vector<std::string> numbered(int n) {
  std::vector<std::string> texts;
  for (int i = 0; i < n; ++i) {
    std::string text(1, 'd');
    text += std::to_string(i);
    text.append(static_cast<size_t>(i % 5), '.');
    texts.push_back(std::move(text));
  }
  return texts;
}

// --- packing
// -------------------------------------------------------------------

TEST(DataLoaderTest, PacksDocumentsIntoShiftedWindows) {
  for (const int64_t prefetch : {0, 2}) {
    // Stream: [B a b E] [B c d e E] [B E] [B f E]  (14 tokens, one epoch).
    DataLoader loader(
        docs({"ab", "cde", "", "f"}), bytes(), options(2, 3, prefetch));
    const int64_t a = 'a', b = 'b', c = 'c', d = 'd', e = 'e', f = 'f';

    Batch first = loader.next();
    EXPECT_EQ(first.inputs.sizes().vec(), (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(first.labels.sizes().vec(), (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(first.inputs.scalar_type(), at::kLong);
    EXPECT_EQ(first.labels.scalar_type(), at::kLong);
    EXPECT_TRUE(first.inputs.device().is_cpu());
    // Windows of 4 tokens: [B a b E], [B c d e].
    EXPECT_EQ(row(first.inputs, 0), (std::vector<int64_t>{kBos, a, b}));
    EXPECT_EQ(row(first.labels, 0), (std::vector<int64_t>{a, b, kEos}));
    EXPECT_EQ(row(first.inputs, 1), (std::vector<int64_t>{kBos, c, d}));
    EXPECT_EQ(row(first.labels, 1), (std::vector<int64_t>{c, d, e}));
    EXPECT_EQ(loader.epoch(), 0);

    // Windows [E B E B] and [f E | B a]: the second crosses into epoch 1.
    Batch second = loader.next();
    EXPECT_EQ(row(second.inputs, 0), (std::vector<int64_t>{kEos, kBos, kEos}));
    EXPECT_EQ(row(second.labels, 0), (std::vector<int64_t>{kBos, kEos, kBos}));
    EXPECT_EQ(row(second.inputs, 1), (std::vector<int64_t>{f, kEos, kBos}));
    EXPECT_EQ(row(second.labels, 1), (std::vector<int64_t>{kEos, kBos, a}));
    EXPECT_EQ(loader.epoch(), 1);

    // Windows [b E B c] and [d e E B].
    Batch third = loader.next();
    EXPECT_EQ(row(third.inputs, 0), (std::vector<int64_t>{b, kEos, kBos}));
    EXPECT_EQ(row(third.labels, 0), (std::vector<int64_t>{kEos, kBos, c}));
    EXPECT_EQ(row(third.inputs, 1), (std::vector<int64_t>{d, e, kEos}));
    EXPECT_EQ(row(third.labels, 1), (std::vector<int64_t>{e, kEos, kBos}));
  }
}

TEST(DataLoaderTest, WrapsAroundEpochsForever) {
  // One 6-token epoch ([B x y E][B E]) and rows of 21 tokens: each row spans
  // several epochs, and the stream stays periodic.
  const std::vector<int64_t> epoch_tokens = {kBos, 'x', 'y', kEos, kBos, kEos};
  DataLoader loader(docs({"xy", ""}), bytes(), options(1, 20, 0));
  int64_t position = 0;
  for (int step = 0; step < 5; ++step) {
    Batch batch = loader.next();
    const std::vector<int64_t> inputs = row(batch.inputs, 0);
    const std::vector<int64_t> labels = row(batch.labels, 0);
    for (int64_t t = 0; t < 20; ++t) {
      ASSERT_EQ(inputs[t], epoch_tokens[(position + t) % 6])
          << "step " << step << " t " << t;
      ASSERT_EQ(labels[t], epoch_tokens[(position + t + 1) % 6])
          << "step " << step << " t " << t;
    }
    position += 21;
    // The epoch of the last token yielded: the next epoch starts only when
    // one of its tokens is needed.
    EXPECT_EQ(loader.epoch(), (position - 1) / 6) << "step " << step;
  }
}

/// Bytes without BOS, as Qwen's tokenizer: documents only end.
class NoBosBytes final : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text) const override {
    return bytes_.encode(text);
  }
  std::string decode(const std::vector<int32_t>& ids) const override {
    return bytes_.decode(ids);
  }
  int64_t vocab_size() const override {
    return 258;
  }
  int32_t bos_id() const override {
    return -1;
  }
  int32_t eos_id() const override {
    return kEos;
  }

 private:
  ByteTokenizer bytes_;
};

TEST(DataLoaderTest, ATokenizerWithoutBosOnlyEndsDocuments) {
  DataLoader loader(
      docs({"ab", "c"}), std::make_shared<NoBosBytes>(), options(1, 4, 0));
  const Batch batch = loader.next();
  EXPECT_EQ(row(batch.inputs, 0), (std::vector<int64_t>{'a', 'b', kEos, 'c'}));
  EXPECT_EQ(row(batch.labels, 0), (std::vector<int64_t>{'b', kEos, 'c', kEos}));
}

TEST(DataLoaderTest, ReadsTheBundledCorpus) {
  DatasetOptions kjv;
  kjv.path = resolve_asset_path("assets/kjv.jsonl.gz");
  DataLoader loader(
      std::make_unique<JsonlDataset>(kjv), bytes(), options(2, 16, 2));
  const Batch batch = loader.next();
  std::vector<int32_t> ids;
  for (const int64_t id : row(batch.inputs, 0)) {
    ids.push_back(static_cast<int32_t>(id));
  }
  EXPECT_EQ(ids.front(), kBos);
  EXPECT_EQ(ByteTokenizer().decode(ids), "In the beginnin");
  EXPECT_EQ(batch.labels[0][15].item<int64_t>(), 'g');
  // Row 1 continues right after row 0's 17 tokens.
  EXPECT_EQ(batch.inputs[1][0].item<int64_t>(), ' ');
  EXPECT_EQ(batch.inputs[1][1].item<int64_t>(), 'G');
}

// --- sharding and shuffling
// -----------------------------------------------------

// The documents, in order, that a loader yields in `batches` batches of 3
// rows of 5 tokens, decoded back from the token stream (which must start at
// a document boundary; `whole`: and end at one, else the last, cut document
// is dropped).
std::vector<std::string> documents_seen(
    DataLoader& loader, int batches, bool whole = true) {
  // Windows do not overlap, so each row's inputs plus its last label is the
  // next stretch of the stream.
  std::vector<int32_t> stream;
  for (int i = 0; i < batches; ++i) {
    const Batch batch = loader.next();
    for (int64_t b = 0; b < 3; ++b) {
      for (const int64_t id : row(batch.inputs, b)) {
        stream.push_back(static_cast<int32_t>(id));
      }
      stream.push_back(
          static_cast<int32_t>(batch.labels[b][4].item<int64_t>()));
    }
  }
  std::vector<std::string> seen;
  std::vector<int32_t> current;
  bool open = false;
  for (const int32_t id : stream) {
    if (id == kBos) {
      EXPECT_FALSE(open) << "BOS inside a document";
      open = true;
      current.clear();
    } else if (id == kEos) {
      EXPECT_TRUE(open) << "EOS outside a document";
      open = false;
      seen.push_back(ByteTokenizer().decode(current));
    } else {
      current.push_back(id);
    }
  }
  EXPECT_TRUE(!whole || !open) << "stream cut inside a document";
  return seen;
}

// The rows of `n` global batches of `dp` ranks' loaders of `batch` rows
// each, in global order (rank 0's rows, then rank 1's, ... per step), as one
// flat list of (inputs, labels) values per row.
std::vector<std::vector<int64_t>> global_rows(
    std::vector<std::unique_ptr<DataLoader>>& ranks, int n) {
  std::vector<std::vector<int64_t>> rows;
  for (int step = 0; step < n; ++step) {
    for (auto& loader : ranks) {
      const Batch b = loader->next();
      for (int64_t i = 0; i < b.inputs.size(0); ++i) {
        std::vector<int64_t> r = row(b.inputs, i);
        const std::vector<int64_t> l = row(b.labels, i);
        r.insert(r.end(), l.begin(), l.end());
        rows.push_back(std::move(r));
      }
    }
  }
  return rows;
}

std::vector<std::unique_ptr<DataLoader>> ranks_of(
    const std::vector<std::string>& all,
    int64_t dp,
    int64_t batch,
    bool shuffle,
    int64_t prefetch = 0) {
  std::vector<std::unique_ptr<DataLoader>> ranks;
  for (int64_t r = 0; r < dp; ++r) {
    ranks.push_back(std::make_unique<DataLoader>(
        docs(all), bytes(), options(batch, 5, prefetch, r, dp, shuffle)));
  }
  return ranks;
}

TEST(DataLoaderTest, DataParallelRanksSplitOneGlobalBatch) {
  // Whatever the data-parallel degree, the ranks' batches of a step, in
  // rank order, are the rows of one rank's batch of the same global size:
  // the global batch does not depend on the split.
  const std::vector<std::string> all = numbered(23);
  for (const bool shuffle : {false, true}) {
    auto one = ranks_of(all, 1, 12, shuffle);
    const auto reference = global_rows(one, 5);
    for (const int64_t dp : {2, 3, 4}) {
      SCOPED_TRACE(
          "dp " + std::to_string(dp) + " shuffle " + std::to_string(shuffle));
      auto ranks = ranks_of(all, dp, 12 / dp, shuffle, /*prefetch=*/2);
      EXPECT_EQ(global_rows(ranks, 5), reference);
      // Every rank stands at the same place in the global stream.
      for (const auto& loader : ranks) {
        EXPECT_EQ(loader->state(), one[0]->state());
      }
    }
  }
}

TEST(DataLoaderTest, ContextParallelRanksKeepTheirChunksOfEveryRow) {
  // cp 3 over seq 12: chunks of 2; rank r keeps chunks r and 5 - r of the
  // rows every rank of its data-parallel group reads, and the loader's
  // state does not depend on the split.
  const std::vector<std::string> all = numbered(17);
  DataLoader whole(docs(all), bytes(), options(2, 12, 0));
  std::vector<std::unique_ptr<DataLoader>> ranks;
  for (int64_t r = 0; r < 3; ++r) {
    auto o = options(2, 12, /*prefetch=*/2);
    o.sequence_split = SequenceSplit{3, r};
    ranks.push_back(std::make_unique<DataLoader>(docs(all), bytes(), o));
  }
  for (int step = 0; step < 4; ++step) {
    const Batch want = whole.next();
    for (int64_t r = 0; r < 3; ++r) {
      const Batch got = ranks[r]->next();
      ASSERT_EQ(got.inputs.sizes(), (std::vector<int64_t>{2, 4}));
      const auto columns = SequenceSplit{3, r}.positions(4);
      EXPECT_TRUE(at::equal(got.inputs, want.inputs.index_select(1, columns)))
          << "step " << step << ", rank " << r;
      EXPECT_TRUE(at::equal(got.labels, want.labels.index_select(1, columns)));
      EXPECT_EQ(ranks[r]->state(), whole.state());
    }
  }
  auto bad = options(1, 10, 0);
  bad.sequence_split = SequenceSplit{3, 0};
  EXPECT_EQ(
      thrown_message<std::invalid_argument>(
          [&] { DataLoader loader(docs(all), bytes(), bad); }),
      "[DataLoader] seq_len must be a multiple of 2 x "
      "sequence_split.shards=3, got 10");
}

TEST(DataLoaderTest, DocumentsNumberEachRowsDocuments) {
  // The stream of PacksDocumentsIntoShiftedWindows: [B a b E] [B c d e E]
  // [B E] [B f E]; each input position's document within its row.
  auto o = options(2, 3, /*prefetch=*/2);
  o.documents = true;
  DataLoader loader(docs({"ab", "cde", "", "f"}), bytes(), o);
  const std::vector<std::vector<std::vector<int64_t>>> want = {
      {{0, 0, 0}, {0, 0, 0}},  // [B a b], [B c d]
      {{0, 1, 1}, {0, 0, 1}},  // [E B E], [f E B]
      {{0, 0, 1}, {0, 0, 0}},  // [b E B], [d e E]
  };
  for (size_t step = 0; step < want.size(); ++step) {
    const Batch batch = loader.next();
    ASSERT_EQ(batch.documents.sizes(), (std::vector<int64_t>{2, 3}));
    for (int64_t b = 0; b < 2; ++b) {
      EXPECT_EQ(row(batch.documents, b), want[step][b])
          << "step " << step << ", row " << b;
    }
  }
  // Without the option there are none.
  DataLoader plain(docs({"ab"}), bytes(), options(1, 3, 0));
  EXPECT_FALSE(plain.next().documents.defined());
}

TEST(DataLoaderTest, DocumentsStayWholeUnderASplitAndStartAtEachBos) {
  // cp 2 over seq 12: each rank keeps its chunks of the inputs but the
  // whole rows' documents, which count up exactly where a BOS starts a
  // document (after the row's first position).
  const std::vector<std::string> all = numbered(17);
  auto whole_options = options(2, 12, 0);
  whole_options.documents = true;
  DataLoader whole(docs(all), bytes(), whole_options);
  auto split_options = options(2, 12, 0);
  split_options.documents = true;
  split_options.sequence_split = SequenceSplit{2, 1};
  DataLoader rank(docs(all), bytes(), split_options);
  for (int step = 0; step < 5; ++step) {
    const Batch want = whole.next();
    const Batch got = rank.next();
    ASSERT_EQ(got.inputs.sizes(), (std::vector<int64_t>{2, 6}));
    EXPECT_TRUE(at::equal(got.documents, want.documents)) << "step " << step;
    for (int64_t b = 0; b < 2; ++b) {
      const auto ids = row(want.documents, b);
      const auto tokens = row(want.inputs, b);
      EXPECT_EQ(ids[0], 0);
      for (size_t t = 1; t < ids.size(); ++t) {
        EXPECT_EQ(ids[t] - ids[t - 1], tokens[t] == kBos ? 1 : 0)
            << "step " << step << ", row " << b << ", position " << t;
      }
    }
  }
}

TEST(DataLoaderTest, EveryEpochReadsEachDocumentOnce) {
  // 23 documents, shuffled: each epoch is a permutation of the corpus, a new
  // one each epoch.
  const std::vector<std::string> all = numbered(23);
  DataLoader loader(docs(all), bytes(), options(3, 5, 2, 0, 1, true));
  const std::vector<std::string> seen = documents_seen(loader, 40, false);
  ASSERT_GE(seen.size(), 3u * 23);
  std::vector<std::vector<std::string>> epochs;
  for (int64_t e = 0; e < 3; ++e) {
    const std::vector<std::string> epoch(
        seen.begin() + e * 23, seen.begin() + (e + 1) * 23);
    EXPECT_EQ(
        std::set<std::string>(epoch.begin(), epoch.end()),
        std::set<std::string>(all.begin(), all.end()))
        << e;
    epochs.push_back(epoch);
  }
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_NE(epochs[0], all);
}

TEST(DataLoaderTest, ShuffleFollowsTheSeed) {
  const std::vector<std::string> all = numbered(40);
  const auto run = [&](bool shuffle, uint64_t seed) {
    DataLoaderOptions o = options(3, 5, 0, 0, 1, shuffle);
    o.seed = seed;
    DataLoader loader(docs(all), bytes(), o);
    return documents_seen(loader, 10, false);
  };
  const auto plain = run(false, 1);
  EXPECT_EQ(plain.front(), "d0");
  EXPECT_EQ(plain[1], "d1.");
  EXPECT_EQ(run(true, 7), run(true, 7));
  EXPECT_NE(run(true, 7), plain);
  EXPECT_NE(run(true, 7), run(true, 8));
}

// --- state and resume
// -------------------------------------------------------------

TEST(DataLoaderTest, RestoredLoaderYieldsTheSameBatches) {
  const std::vector<std::string> all = numbered(17);
  constexpr int kBatches = 40;
  for (const bool shuffle : {false, true}) {
    for (const int64_t prefetch : {0, 3}) {
      for (const int64_t rank : {0, 1}) {
        const DataLoaderOptions o = options(2, 7, prefetch, rank, 2, shuffle);
        DataLoader reference(docs(all), bytes(), o);
        const std::vector<int64_t> expected = take(reference, kBatches);
        for (const int stop : {0, 1, 6, 13, 39}) {
          SCOPED_TRACE(
              "shuffle " + std::to_string(shuffle) + " prefetch " +
              std::to_string(prefetch) + " rank " + std::to_string(rank) +
              " stop " + std::to_string(stop));
          DataLoader first(docs(all), bytes(), o);
          const std::vector<int64_t> head = take(first, stop);
          const std::string saved = first.state().to_json();
          DataLoader resumed(docs(all), bytes(), o);
          resumed.load_state(DataLoaderState::from_json(saved));
          EXPECT_EQ(resumed.state(), first.state());
          std::vector<int64_t> joined = head;
          const std::vector<int64_t> tail = take(resumed, kBatches - stop);
          joined.insert(joined.end(), tail.begin(), tail.end());
          ASSERT_EQ(joined, expected);
          // Loading into a loader that already ran (and prefetched) works
          // the same.
          first.load_state(DataLoaderState::from_json(saved));
          EXPECT_EQ(take(first, kBatches - stop), tail);
        }
      }
    }
  }
}

TEST(DataLoaderTest, StateReshardsAcrossDataParallelDegrees) {
  // A state saved by any of dp 1, 2, 3, 4 ranks (after a few global
  // batches of 12 rows) resumes at any other degree: the resumed ranks'
  // rows continue the uninterrupted stream, shuffle and epochs included.
  const std::vector<std::string> all = numbered(19);
  auto one = ranks_of(all, 1, 12, /*shuffle=*/true);
  const auto stream = global_rows(one, 9);
  for (const int64_t saved : {1, 2, 3, 4}) {
    for (const int64_t resumed : {1, 2, 3, 4}) {
      SCOPED_TRACE(
          "saved at dp " + std::to_string(saved) + ", resumed at dp " +
          std::to_string(resumed));
      auto before = ranks_of(all, saved, 12 / saved, true, /*prefetch=*/2);
      auto head = global_rows(before, 4);
      const std::string json = before[saved - 1]->state().to_json();
      auto after = ranks_of(all, resumed, 12 / resumed, true, /*prefetch=*/1);
      for (auto& loader : after) {
        loader->load_state(DataLoaderState::from_json(json));
      }
      const auto tail = global_rows(after, 5);
      head.insert(head.end(), tail.begin(), tail.end());
      EXPECT_EQ(head, stream);
    }
  }
}

TEST(DataLoaderTest, StateIsSmallJsonAndChecked) {
  DataLoader loader(docs(numbered(9)), bytes(), options(1, 5, 0, 1, 2));
  take(loader, 3);
  const DataLoaderState state = loader.state();
  EXPECT_EQ(
      state.to_json(),
      "{\"epoch\":0,\"document\":6,\"token\":2,\"dataset_size\":9}");
  EXPECT_EQ(DataLoaderState::from_json(state.to_json()), state);
  EXPECT_NE(
      thrown_message<std::runtime_error>([] {
        DataLoaderState::from_json("{\"epoch\":1}");
      }).find("field 'document' is missing or not an integer"),
      std::string::npos);
  EXPECT_NE(
      thrown_message<std::runtime_error>([] {
        DataLoaderState::from_json("not json");
      }).find("[DataLoaderState] invalid JSON"),
      std::string::npos);

  // The state of an earlier per-rank loader: one rank's is a position in
  // the global stream, several ranks' are not.
  EXPECT_EQ(
      DataLoaderState::from_json(
          "{\"epoch\":1,\"document\":2,\"token\":3,\"dp_rank\":0,"
          "\"dp_size\":1,\"dataset_size\":9}"),
      (DataLoaderState{1, 2, 3, 9}));
  EXPECT_NE(
      thrown_message<std::runtime_error>([] {
        DataLoaderState::from_json(
            "{\"epoch\":1,\"document\":2,\"token\":3,\"dp_rank\":1,"
            "\"dp_size\":2,\"dataset_size\":9}");
      }).find("is the state of one of 2 ranks of an earlier per-rank loader"),
      std::string::npos);
  DataLoader other_corpus(docs(numbered(11)), bytes(), options(1, 5, 0, 1, 2));
  EXPECT_NE(
      thrown_message<std::runtime_error>([&] {
        other_corpus.load_state(state);
      }).find("its dataset_size is 9 but this loader's is 11"),
      std::string::npos);
  DataLoaderState past = state;
  past.document = 9;
  EXPECT_NE(
      thrown_message<std::runtime_error>([&] {
        loader.load_state(past);
      }).find("document in [0, 9)"),
      std::string::npos);
  past.document = 1;
  past.token = 99;
  loader.load_state(past);
  EXPECT_NE(
      thrown_message<std::runtime_error>([&] {
        loader.next();
      }).find("points past the 5 tokens of document 1"),
      std::string::npos);
}

// --- prefetching -------------------------------------------------------------

// Fails on document `bad` with a message of its own.
class FailingDataset final : public TextDataset {
 public:
  explicit FailingDataset(int64_t bad) : bad_(bad) {}
  int64_t size() const override {
    return 10;
  }
  std::string text(int64_t index) const override {
    if (index == bad_) {
      throw std::runtime_error(
          "corpus.jsonl:" + std::to_string(index + 1) +
          ": invalid JSON (test)");
    }
    return "document";
  }

 private:
  int64_t bad_;
};

TEST(DataLoaderTest, WorkerErrorsReachNextWithTheirMessage) {
  for (const int64_t prefetch : {0, 1, 4}) {
    DataLoader loader(
        std::make_unique<FailingDataset>(3), bytes(), options(1, 10, prefetch));
    // Documents are 10 tokens (BOS, 8 bytes, EOS): 3 rows of 11 tokens need
    // documents 0-3; the third batch needs document 3.
    take(loader, 2);
    for (int again = 0; again < 2; ++again) {
      EXPECT_EQ(
          thrown_message<std::runtime_error>([&] { loader.next(); }),
          "corpus.jsonl:4: invalid JSON (test)")
          << prefetch;
    }
  }
}

TEST(DataLoaderTest, DestructorStopsABusyWorker) {
  // The worker fills its queue and waits; destruction must not hang, with or
  // without a batch ever taken.
  for (int taken = 0; taken < 3; ++taken) {
    DataLoader loader(docs(numbered(5)), bytes(), options(4, 64, 3));
    take(loader, taken);
  }
}

// --- validation --------------------------------------------------------------

TEST(DataLoaderTest, AnEmptyDatasetThrows) {
  EXPECT_EQ(
      thrown_message<std::runtime_error>(
          [] { DataLoader loader(docs({}), bytes(), options(1, 4, 0)); }),
      "[DataLoader] the dataset has no document; allowed: a corpus of at "
      "least one");
  // Fewer documents than ranks is fine: the ranks share one stream.
  DataLoader loader(
      docs({"one", "two", "three"}), bytes(), options(1, 4, 0, 3, 4));
  EXPECT_EQ(loader.next().inputs.size(0), 1);
}

TEST(DataLoaderTest, ValidatesOptions) {
  const auto make = [](DataLoaderOptions o) {
    DataLoader loader(docs({"a"}), bytes(), o);
  };
  EXPECT_EQ(
      thrown_message<std::invalid_argument>(
          [&] { make(DataLoaderOptions(1, 0)); }),
      "[DataLoader] seq_len must be >= 1, got 0");
  EXPECT_EQ(
      thrown_message<std::invalid_argument>(
          [&] { make(DataLoaderOptions(-2, 8)); }),
      "[DataLoader] batch_size must be >= 1, got -2");
  EXPECT_EQ(
      thrown_message<std::invalid_argument>([&] { make(options(1, 8, -1)); }),
      "[DataLoader] prefetch must be >= 0, got -1");
  EXPECT_EQ(
      thrown_message<std::invalid_argument>(
          [&] { make(options(1, 8, 0, 0, 0)); }),
      "[DataLoader] dp_size must be >= 1, got 0");
  EXPECT_EQ(
      thrown_message<std::invalid_argument>(
          [&] { make(options(1, 8, 0, 2, 2)); }),
      "[DataLoader] dp_rank must be in [0, dp_size=2), got 2");
  EXPECT_EQ(
      thrown_message<std::invalid_argument>(
          [&] { make(options(1, 8, 0, -1, 2)); }),
      "[DataLoader] dp_rank must be in [0, dp_size=2), got -1");
  EXPECT_EQ(
      thrown_message<std::invalid_argument>(
          [] { DataLoader loader(nullptr, bytes(), DataLoaderOptions(1, 1)); }),
      "[DataLoader] dataset must not be null");
}

// --- token shards against the text they came from
// -----------------------------------

TEST_F(DataFilesTest, ShardRunGivesTheSameBatchesAsTheJsonlRun) {
  // A JSONL corpus, tokenised into several shards with the bundled tiktoken
  // file, then both read by loaders with the same options.
  DatasetOptions kjv;
  kjv.path = resolve_asset_path("assets/kjv.jsonl.gz");
  const JsonlDataset source(kjv);
  std::vector<std::string> texts;
  for (int64_t i = 0; i < 30; ++i) {
    texts.push_back(source.text(i).substr(0, 100 + 13 * i));
  }
  const std::string jsonl = write_jsonl("corpus.jsonl", texts);
  const auto tokenizer = std::make_shared<TiktokenTokenizer>(
      resolve_asset_path("assets/kjv_tiktoken.txt"));
  DatasetOptions text_options;
  text_options.path = jsonl;
  {
    const JsonlDataset dataset(text_options);
    TokenShardWriter writer((dir_ / "shards").string(), *tokenizer, 500);
    for (int64_t i = 0; i < dataset.size(); ++i) {
      writer.add(dataset.tokens(i, *tokenizer));
    }
    EXPECT_GT(writer.finish().size(), 3u);
  }
  DatasetOptions shard_options;
  shard_options.path = (dir_ / "shards").string();
  for (const bool shuffle : {false, true}) {
    for (const int64_t rank : {0, 1}) {
      const DataLoaderOptions o = options(4, 32, 2, rank, 2, shuffle);
      DataLoader from_text(
          std::make_unique<JsonlDataset>(text_options), tokenizer, o);
      DataLoader from_shards(
          std::make_unique<TokenShardDataset>(shard_options), tokenizer, o);
      // 30 batches of 132 tokens: more than one epoch of a rank's shard.
      EXPECT_EQ(take(from_text, 30), take(from_shards, 30))
          << "shuffle " << shuffle << " rank " << rank;
      EXPECT_GE(from_shards.epoch(), 1);
    }
  }
}

}  // namespace
}  // namespace baton
