// Problem buckets and the tuning database: JSON round trip, replacement and merging, lookups
// across devices, versions and drivers, the nearest-bucket fallback, malformed input, atomic
// saving, and the databases shipped inside the library.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "ftattn/config.hpp"
#include "ftattn/errors.hpp"
#include "ftattn/tuner.hpp"
#include "tests/support/temp_dir.hpp"
#include "tuner/embedded_dbs.hpp"

namespace fs = std::filesystem;
using namespace ftattn;
using namespace ftattn::tuner;

namespace {

using ftattn::test::TempDir;

const Arch kSm90a{90, true};

Family family(Mask mask = Mask::causal, int head_dim = 128) {
  return Family{kSm90a, Precision::f16, Protection::none, head_dim, mask};
}

KernelConfig config(const Family& f, int block_m, int block_n, int warps, int stages) {
  KernelConfig c = f.open_config();
  c.block_m = block_m;
  c.block_n = block_n;
  c.num_warps = warps;
  c.num_stages = stages;
  return c;
}

DeviceKey h200(int driver = 13000) { return DeviceKey{"NVIDIA H200", 90, driver, FTATTN_VERSION}; }

Entry entry(const DeviceKey& device, const Family& f, Bucket bucket, KernelConfig best,
            double best_tflops = 350.5, double default_tflops = 340.25) {
  return Entry{device, f, bucket, best, best_tflops, default_tflops};
}

Bucket causal_bucket(int seqlen, int bh) { return Bucket{seqlen, bh, true}; }

void require_same(const std::vector<Entry>& a, const std::vector<Entry>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].device == b[i].device);
    CHECK(a[i].family == b[i].family);
    CHECK(a[i].bucket == b[i].bucket);
    CHECK(a[i].best == b[i].best);
    CHECK(a[i].best_tflops == b[i].best_tflops);
    CHECK(a[i].default_tflops == b[i].default_tflops);
    CHECK(a[i].default_config == b[i].default_config);
  }
}

// Collects every note find() gives.
struct Notes {
  std::vector<std::string> got;
  std::function<void(const std::string&)> fn() {
    return [this](const std::string& m) { got.push_back(m); };
  }
};

// One entry as JSON text, with fields overridable for the malformed-entry tests.
nlohmann::json entry_json() {
  return nlohmann::json::parse(R"({
    "gpu": "NVIDIA H200", "sm": 90, "driver": 13000, "ftattn": ")" FTATTN_VERSION R"(",
    "arch": "sm_90a", "precision": "f16", "protection": "none", "head_dim": 128,
    "mask": "causal", "bucket": {"seqlen": 4096, "batch_heads": 128, "causal": true},
    "best": "ftattn_fwd_sm90a_f16_d128_m128n64_w4s2_causal_none",
    "best_tflops": 350.1, "default_tflops": 340.2})");
}

std::string db_text(const std::vector<nlohmann::json>& entries) {
  nlohmann::json root = {{"format", 1}, {"entries", entries}};
  return root.dump();
}

}  // namespace

TEST_CASE("buckets round seqlen_k and batch*heads up to powers of two", "[tuner][db]") {
  auto bucket = [](int batch, int heads, int seqlen_q, int seqlen_k, Mask mask) {
    return Bucket::of(Problem::bhsd(batch, heads, heads, seqlen_q, seqlen_k, 128), mask);
  };
  CHECK(bucket(1, 1, 300, 300, Mask::none).seqlen == 512);
  CHECK(bucket(1, 1, 1, 1, Mask::none).seqlen == 512);
  CHECK(bucket(1, 1, 512, 512, Mask::none).seqlen == 512);
  CHECK(bucket(1, 1, 513, 513, Mask::none).seqlen == 1024);
  CHECK(bucket(1, 1, 4096, 4096, Mask::none).seqlen == 4096);
  CHECK(bucket(1, 1, 5000, 5000, Mask::none).seqlen == 8192);
  // seqlen_k decides, not seqlen_q.
  CHECK(bucket(1, 1, 100, 5000, Mask::none).seqlen == 8192);
  CHECK(bucket(1, 1, 5000, 100, Mask::none).seqlen == 512);

  CHECK(bucket(3, 5, 1024, 1024, Mask::none).batch_heads == 16);
  CHECK(bucket(1, 1, 1024, 1024, Mask::none).batch_heads == 1);
  CHECK(bucket(4, 32, 1024, 1024, Mask::none).batch_heads == 128);
  CHECK(bucket(4, 33, 1024, 1024, Mask::none).batch_heads == 256);
  // heads_q counts, not heads_kv (GQA).
  CHECK(Bucket::of(Problem::bhsd(2, 32, 8, 1024, 1024, 128), Mask::none).batch_heads == 64);

  CHECK_FALSE(bucket(1, 1, 1024, 1024, Mask::none).causal);
  CHECK(bucket(1, 1, 1024, 1024, Mask::causal).causal);
  CHECK_FALSE(bucket(1, 1, 1024, 1024, Mask::block_sparse).causal);
  CHECK(bucket(1, 1, 1024, 1024, Mask::block_sparse_causal).causal);

  CHECK(bucket(1, 1, 1024, 1024, Mask::causal) == Bucket{1024, 1, true});
}

TEST_CASE("bucket names", "[tuner][db]") {
  CHECK(Bucket{4096, 128, true}.to_string() == "s4096_bh128_causal");
  CHECK(Bucket{512, 512, false}.to_string() == "s512_bh512_full");
  CHECK(Bucket::of(Problem::bhsd(3, 5, 5, 300, 300, 64), Mask::block_sparse_causal).to_string() ==
        "s512_bh16_causal");
}

TEST_CASE("a database round-trips through JSON", "[tuner][db]") {
  const Family causal = family(Mask::causal);
  const Family full = family(Mask::none, 64);
  Database db;
  db.put(entry(h200(), causal, causal_bucket(4096, 128), config(causal, 128, 64, 4, 2)));
  db.put(entry(h200(), full, Bucket{512, 512, false}, config(full, 64, 64, 4, 3), 123.0625, 99));
  db.put(entry(DeviceKey{"NVIDIA H100 80GB HBM3", 90, 12080, FTATTN_VERSION}, causal,
               causal_bucket(1024, 8), config(causal, 64, 64, 4, 1), 0.1, 0.3));

  const std::string text = db.dump();
  // Pretty-printed with two-space indents and the documented fields.
  CHECK(text.starts_with("{\n  \"format\": 1,\n  \"entries\": ["));
  CHECK(text.ends_with("\n"));
  for (const char* key : {"\"gpu\"", "\"sm\"", "\"driver\"", "\"ftattn\"", "\"arch\": \"sm_90a\"",
                          "\"precision\": \"f16\"", "\"protection\": \"none\"", "\"head_dim\"",
                          "\"mask\": \"causal\"", "\"seqlen\": 4096", "\"batch_heads\": 128",
                          "\"causal\": true", "\"best_tflops\"", "\"default_tflops\"",
                          "\"best\": \"ftattn_fwd_sm90a_f16_d128_m128n64_w4s2_causal_none\""}) {
    INFO(key);
    CHECK(text.find(key) != std::string::npos);
  }

  const Database back = Database::parse(text, "test");
  require_same(back.entries(), db.entries());
  CHECK(back.dump() == text);

  auto found = back.find(h200(), causal, causal_bucket(4096, 128));
  REQUIRE(found);
  CHECK(*found == config(causal, 128, 64, 4, 2));
  found = back.find(h200(), full, Bucket{512, 512, false});
  REQUIRE(found);
  CHECK(*found == config(full, 64, 64, 4, 3));
}

TEST_CASE("an entry's heuristic default is written only when recorded", "[tuner][db]") {
  const Family f = family();
  const Bucket b = causal_bucket(4096, 128);
  Entry with_default = entry(h200(), f, b, config(f, 128, 64, 4, 2));
  with_default.default_config = bucket_default(f, b);
  Database db;
  db.put(with_default);
  const std::string text = db.dump();
  CHECK_THAT(text, Catch::Contains("\"best\": \"" + with_default.best.name() + "\",\n      " +
                                   "\"default\": \"" + bucket_default(f, b).name() + "\","));
  const Database back = Database::parse(text, "test");
  require_same(back.entries(), db.entries());
  CHECK(back.dump() == text);
  // Older entries (the shipped DBs') have none, and stay so: a file without it dumps as it was.
  Database old;
  old.put(entry(h200(), f, b, config(f, 128, 64, 4, 2)));
  CHECK_FALSE(old.entries()[0].default_config);
  CHECK(old.dump().find("\"default\"") == std::string::npos);
  CHECK(Database::parse(old.dump(), "old").dump() == old.dump());
}

TEST_CASE("find ignores an entry tuned against another heuristic default", "[tuner][db]") {
  const Family f = family();
  const Bucket b = causal_bucket(4096, 128);
  const KernelConfig best = config(f, 128, 64, 4, 2);
  const KernelConfig now = bucket_default(f, b);
  // Some other complete config of the family stands for what the heuristic picked back then.
  const KernelConfig before =
      now == config(f, 64, 64, 4, 1) ? config(f, 64, 64, 4, 2) : config(f, 64, 64, 4, 1);
  Entry current = entry(h200(), f, b, best);
  current.default_config = now;
  Entry stale = current;
  stale.default_config = before;

  SECTION("the same default: used, silently") {
    Database db;
    db.put(current);
    Notes notes;
    CHECK(db.find(h200(), f, b, notes.fn()) == best);
    CHECK(notes.got.empty());
  }
  SECTION("another default: ignored with a note, so the heuristic decides") {
    Database db;
    db.put(stale);
    Notes notes;
    CHECK_FALSE(db.find(h200(), f, b, notes.fn()));
    REQUIRE(notes.got.size() == 1);
    CHECK_THAT(notes.got[0], Catch::Contains("s4096_bh128") && Catch::Contains(before.name()) &&
                                 Catch::Contains("now picks " + now.name()) &&
                                 Catch::Contains("ignoring it"));
  }
  SECTION("a stale entry is no fallback either") {
    Database db;
    Entry neighbour = stale;
    neighbour.bucket = causal_bucket(8192, 128);
    neighbour.default_config =
        before == bucket_default(f, neighbour.bucket) ? config(f, 64, 64, 4, 3) : before;
    db.put(neighbour);
    Notes notes;
    CHECK_FALSE(db.find(h200(), f, b, notes.fn()));
    CHECK(notes.got.empty());  // nothing of this bucket was ignored
  }
  SECTION("an entry without a recorded default is used as before") {
    Database db;
    db.put(entry(h200(), f, b, best));
    CHECK(db.find(h200(), f, b) == best);
  }
  SECTION("a stale entry of a newer driver leaves the older current one in charge") {
    Database db;
    Entry older = current;
    older.device.driver_version = 12080;
    db.put(older);
    Entry newer = stale;
    newer.best = config(f, 64, 64, 4, 3);
    db.put(newer);
    Notes notes;
    CHECK(db.find(h200(13000), f, b, notes.fn()) == best);
    CHECK(notes.got.empty());
  }
}

TEST_CASE("dump is independent of insertion order", "[tuner][db]") {
  const Family f = family();
  std::vector<Entry> es = {
      entry(h200(), f, causal_bucket(4096, 128), config(f, 128, 64, 4, 2)),
      entry(h200(), f, causal_bucket(1024, 128), config(f, 64, 64, 4, 2)),
      entry(DeviceKey{"NVIDIA A100", 80, 12000, FTATTN_VERSION}, family(Mask::causal, 64),
            causal_bucket(2048, 4), config(family(Mask::causal, 64), 64, 64, 4, 2)),
  };
  Database a, b;
  for (const Entry& e : es) a.put(e);
  for (auto it = es.rbegin(); it != es.rend(); ++it) b.put(*it);
  CHECK(a.dump() == b.dump());
  CHECK(a.entries().front().device.gpu_name == "NVIDIA A100");
}

TEST_CASE("put replaces an entry with the same device, family and bucket", "[tuner][db]") {
  const Family f = family();
  Database db;
  db.put(entry(h200(), f, causal_bucket(4096, 128), config(f, 128, 64, 4, 2), 300));
  db.put(entry(h200(), f, causal_bucket(4096, 128), config(f, 64, 64, 4, 3), 310));
  REQUIRE(db.entries().size() == 1);
  CHECK(db.entries()[0].best == config(f, 64, 64, 4, 3));
  CHECK(db.entries()[0].best_tflops == 310);

  // Another bucket, another family or another driver is another key.
  db.put(entry(h200(), f, causal_bucket(8192, 128), config(f, 128, 64, 4, 2)));
  db.put(entry(h200(), family(Mask::none), Bucket{4096, 128, false},
               config(family(Mask::none), 128, 64, 4, 2)));
  db.put(entry(h200(12080), f, causal_bucket(4096, 128), config(f, 128, 64, 4, 2)));
  CHECK(db.entries().size() == 4);
}

TEST_CASE("put refuses entries that would not load back", "[tuner][db]") {
  const Family f = family();
  Database db;
  // The best config of another family.
  CHECK_THROWS_AS(db.put(entry(h200(), f, causal_bucket(4096, 128),
                               config(family(Mask::causal, 64), 128, 64, 4, 2))),
                  ConfigError);
  // A bucket that Bucket::of never makes, and one whose causal flag contradicts the mask.
  CHECK_THROWS_AS(db.put(entry(h200(), f, causal_bucket(3000, 128), config(f, 128, 64, 4, 2))),
                  ConfigError);
  CHECK_THROWS_AS(db.put(entry(h200(), f, Bucket{4096, 128, false}, config(f, 128, 64, 4, 2))),
                  ConfigError);
  // An incomplete config.
  KernelConfig open = config(f, 128, 64, 4, 2);
  open.num_stages = 0;
  CHECK_THROWS_AS(db.put(entry(h200(), f, causal_bucket(4096, 128), open)), ConfigError);
  CHECK(db.entries().empty());
}

TEST_CASE("merge lets the other database win", "[tuner][db]") {
  const Family f = family();
  Database mine, theirs;
  mine.put(entry(h200(), f, causal_bucket(4096, 128), config(f, 128, 64, 4, 2), 300));
  mine.put(entry(h200(), f, causal_bucket(1024, 128), config(f, 64, 64, 4, 2), 200));
  theirs.put(entry(h200(), f, causal_bucket(4096, 128), config(f, 64, 64, 4, 3), 320));
  theirs.put(entry(h200(), f, causal_bucket(16384, 128), config(f, 128, 64, 4, 1), 400));
  mine.merge(theirs);
  REQUIRE(mine.entries().size() == 3);
  CHECK(mine.find(h200(), f, causal_bucket(4096, 128)) == config(f, 64, 64, 4, 3));
  CHECK(mine.find(h200(), f, causal_bucket(1024, 128)) == config(f, 64, 64, 4, 2));
  CHECK(mine.find(h200(), f, causal_bucket(16384, 128)) == config(f, 128, 64, 4, 1));
}

TEST_CASE("find ignores entries of another GPU, ftattn version or a newer driver", "[tuner][db]") {
  const Family f = family();
  const Bucket b = causal_bucket(4096, 128);
  const KernelConfig best = config(f, 128, 64, 4, 2);

  SECTION("another GPU") {
    Database db;
    db.put(entry(DeviceKey{"NVIDIA H100 80GB HBM3", 90, 13000, FTATTN_VERSION}, f, b, best));
    db.put(entry(DeviceKey{"NVIDIA GH200", 90, 13000, FTATTN_VERSION}, f, b, best));
    db.put(entry(DeviceKey{"NVIDIA H200", 100, 13000, FTATTN_VERSION}, f, b, best));  // other sm
    Notes notes;
    CHECK_FALSE(db.find(h200(), f, b, notes.fn()));
    REQUIRE(notes.got.size() == 1);
    CHECK_THAT(notes.got[0], Catch::Contains("was made on NVIDIA") &&
                                 Catch::Contains("ignoring it") && Catch::Contains("s4096_bh128"));
    // No note callback: still nothing, and no crash.
    CHECK_FALSE(db.find(h200(), f, b));
  }
  SECTION("another ftattn version") {
    Database db;
    db.put(entry(DeviceKey{"NVIDIA H200", 90, 13000, "0.0.1"}, f, b, best));
    Notes notes;
    CHECK_FALSE(db.find(h200(), f, b, notes.fn()));
    REQUIRE(notes.got.size() == 1);
    CHECK_THAT(notes.got[0], Catch::Contains("ftattn 0.0.1") && Catch::Contains("ignoring it"));
  }
  SECTION("a newer driver") {
    Database db;
    db.put(entry(h200(13010), f, b, best));
    Notes notes;
    CHECK_FALSE(db.find(h200(13000), f, b, notes.fn()));
    REQUIRE(notes.got.size() == 1);
    CHECK_THAT(notes.got[0], Catch::Contains("driver 13010") && Catch::Contains("ignoring it"));
  }
  SECTION("an older or equal driver is fine, silently") {
    Database db;
    db.put(entry(h200(12080), f, b, best));
    Notes notes;
    CHECK(db.find(h200(13000), f, b, notes.fn()) == best);
    CHECK(db.find(h200(12080), f, b, notes.fn()) == best);
    CHECK(notes.got.empty());
  }
  SECTION("the newest usable driver wins") {
    Database db;
    db.put(entry(h200(12000), f, b, config(f, 64, 64, 4, 1)));
    db.put(entry(h200(12080), f, b, config(f, 64, 64, 4, 2)));
    db.put(entry(h200(13010), f, b, config(f, 64, 64, 4, 3)));
    CHECK(db.find(h200(13000), f, b) == config(f, 64, 64, 4, 2));
    CHECK(db.find(h200(12050), f, b) == config(f, 64, 64, 4, 1));
  }
  SECTION("an exact match of this device needs no note about other devices") {
    Database db;
    db.put(entry(DeviceKey{"NVIDIA H100 80GB HBM3", 90, 13000, FTATTN_VERSION}, f, b,
                 config(f, 64, 64, 4, 2)));
    db.put(entry(h200(), f, b, best));
    Notes notes;
    CHECK(db.find(h200(), f, b, notes.fn()) == best);
    CHECK(notes.got.empty());
  }
  SECTION("another family is no match and no note") {
    Database db;
    db.put(entry(h200(), f, b, best));
    Notes notes;
    CHECK_FALSE(db.find(h200(), family(Mask::causal, 64), b, notes.fn()));
    Family sm90 = f;
    sm90.arch = Arch{90, false};
    CHECK_FALSE(db.find(h200(), sm90, b, notes.fn()));
    CHECK(notes.got.empty());
  }
}

TEST_CASE("find falls back to the nearest bucket of the same causality", "[tuner][db]") {
  const Family f = family();
  const KernelConfig at1k = config(f, 64, 64, 4, 1);
  const KernelConfig at4k = config(f, 128, 64, 4, 2);
  Database db;
  db.put(entry(h200(), f, causal_bucket(1024, 128), at1k));
  db.put(entry(h200(), f, causal_bucket(4096, 128), at4k));

  CHECK(db.find(h200(), f, causal_bucket(512, 128)) == at1k);
  CHECK(db.find(h200(), f, causal_bucket(8192, 128)) == at4k);
  CHECK(db.find(h200(), f, causal_bucket(2048, 128)) == at1k);  // tie on seqlen: smaller
  CHECK(db.find(h200(), f, causal_bucket(1024, 64)) == at1k);
  CHECK(db.find(h200(), f, causal_bucket(2048, 256)) == at1k);  // one step in each
  // Seqlen first, batch*heads second.
  const KernelConfig at8k_bh64 = config(f, 128, 64, 4, 3);
  db.put(entry(h200(), f, causal_bucket(8192, 64), at8k_bh64));
  CHECK(db.find(h200(), f, causal_bucket(8192, 128)) == at8k_bh64);
  CHECK(db.find(h200(), f, causal_bucket(8192, 256)) == at4k);
  CHECK(db.find(h200(), f, causal_bucket(4096, 64)) == at4k);
  // Never across the causal flag: a non-causal lookup finds none of the causal entries.
  CHECK_FALSE(db.find(h200(), f, Bucket{1024, 128, false}));
  // Entries of another device are never a fallback.
  Database other;
  other.put(entry(DeviceKey{"NVIDIA H100 80GB HBM3", 90, 13000, FTATTN_VERSION}, f,
                  causal_bucket(1024, 128), at1k));
  other.put(entry(h200(13010), f, causal_bucket(1024, 128), at1k));
  Notes notes;
  CHECK_FALSE(other.find(h200(), f, causal_bucket(2048, 128), notes.fn()));
  CHECK(notes.got.empty());  // nothing for *this* bucket was ignored
}

TEST_CASE("find falls back no further than one power of two in seqlen and batch*heads",
          "[tuner][db]") {
  const Family f = family();
  Database db;
  db.put(entry(h200(), f, causal_bucket(4096, 128), config(f, 128, 64, 4, 2)));
  // Any usable entry answered any problem: 128 keys of one head, or 256k keys.
  for (const Bucket b :
       {causal_bucket(512, 1), causal_bucket(262144, 128), causal_bucket(1024, 128),
        causal_bucket(16384, 128), causal_bucket(4096, 32), causal_bucket(4096, 512),
        causal_bucket(16384, 512)}) {
    INFO(b.to_string());
    Notes notes;
    CHECK_FALSE(db.find(h200(), f, b, notes.fn()));
    CHECK(notes.got.empty());  // the heuristic decides, as without a DB: nothing to note
  }
  CHECK_FALSE(db.find(h200(), f, Bucket::of(Problem::bhsd(1, 1, 1, 128, 128, 128), Mask::causal)));
}

TEST_CASE("malformed entries are skipped, good ones load", "[tuner][db]") {
  std::vector<nlohmann::json> entries;
  entries.push_back(entry_json());  // good
  auto with = [](const char* key, nlohmann::json value) {
    nlohmann::json j = entry_json();
    j[key] = value;
    return j;
  };
  entries.push_back(with("precision", "f17"));                                           // bad enum
  entries.push_back(with("mask", "diagonal"));                                           // bad enum
  entries.push_back(with("arch", "sm_91"));                                              // bad arch
  entries.push_back(with("best", "ftattn_fwd_sm90a_f16_d128_oops"));                     // bad name
  entries.push_back(with("best", "ftattn_fwd_sm90a_f16_d64_m128n64_w4s2_causal_none"));  // family
  entries.push_back(with("best", "ftattn_fwd_sm90a_f16_d128_m128n64_w4s2_none_none"));   // mask
  entries.push_back(with("best", "ftattn_fwd_sm90a_f16_d128_m100n64_w4s2_causal_none"));  // invalid
  entries.push_back(with("sm", "ninety"));                                                // type
  entries.push_back(with("best_tflops", nullptr));                                        // type
  entries.push_back(with("bucket", {{"seqlen", 4096}, {"batch_heads", 128}, {"causal", false}}));
  entries.push_back(with("bucket", {{"seqlen", 4000}, {"batch_heads", 128}, {"causal", true}}));
  entries.push_back(with("bucket", 7));
  entries.push_back(with("default", 7));                                 // type
  entries.push_back(with("default", "ftattn_fwd_sm90a_f16_d128_oops"));  // bad name
  entries.push_back(
      with("default", "ftattn_fwd_sm90a_f16_d64_m128n64_w4s2_causal_none"));  // family
  {
    nlohmann::json j = entry_json();
    j.erase("gpu");
    entries.push_back(j);  // missing field
  }
  entries.push_back(42);  // not an object
  {
    nlohmann::json j = entry_json();  // a second good one, another bucket
    j["bucket"]["seqlen"] = 8192;
    j["extra"] = "unknown fields are ignored";
    entries.push_back(j);
  }

  Database db;
  REQUIRE_NOTHROW(db = Database::parse(db_text(entries), "malformed.json"));
  REQUIRE(db.entries().size() == 2);
  const Family f = family();
  const KernelConfig best =
      KernelConfig::parse("ftattn_fwd_sm90a_f16_d128_m128n64_w4s2_causal_none");
  CHECK(db.find(h200(), f, causal_bucket(4096, 128)) == best);
  CHECK(db.find(h200(), f, causal_bucket(8192, 128)) == best);
  CHECK(db.entries()[0].best_tflops == 350.1);
  CHECK(db.entries()[0].default_tflops == 340.2);

  // The skipped ones (18 of the 20) are kept as written, so saving the file loses none of them:
  // another ftattn version may read what this one cannot.
  CHECK(db.unread().size() == entries.size() - 2);
  const Database again = Database::parse(db.dump(), "dumped");
  require_same(again.entries(), db.entries());
  CHECK(again.unread() == db.unread());
  CHECK(again.dump() == db.dump());
}

TEST_CASE("a bad top level is a CacheError naming the origin", "[tuner][db]") {
  for (const char* text : {"", "{", "[]", "42", R"({"entries": []})",
                           R"({"format": 0, "entries": []})", R"({"format": "1", "entries": []})",
                           R"({"format": 1})", R"({"format": 1, "entries": {}})"}) {
    INFO(text);
    CHECK_THROWS_AS(Database::parse(text, "where/it/came/from.json"), CacheError);
    CHECK_THROWS_WITH(
        Database::parse(text, "where/it/came/from.json"),
        Catch::Contains("where/it/came/from.json") && Catch::Contains("delete or fix it"));
  }
  CHECK(Database::parse(R"({"format": 1, "entries": []})", "empty").entries().empty());
  // A newer ftattn's file is not broken: it must not be deleted, but another file given.
  CHECK_THROWS_WITH(
      Database::parse(R"({"format": 2, "entries": []})", "newer.json"),
      Catch::Contains("newer.json") && Catch::Contains("format 2 was written by a newer ftattn") &&
          Catch::Contains("another --db file") && !Catch::Contains("delete or fix it"));
}

TEST_CASE("load: a missing file is empty, invalid JSON throws", "[tuner][db]") {
  TempDir dir;
  CHECK(Database::load(dir.path() / "nope.json").entries().empty());
  CHECK(Database::load(dir.path() / "no" / "such" / "dir" / "tuning.json").entries().empty());

  const fs::path bad = dir.path() / "tuning.json";
  std::ofstream(bad) << "{\"format\": 1, \"entries\": [";
  CHECK_THROWS_AS(Database::load(bad), CacheError);
  CHECK_THROWS_WITH(Database::load(bad),
                    Catch::Contains(bad.string()) && Catch::Contains("delete or fix it"));

  // A directory where the file should be.
  fs::create_directories(dir.path() / "isdir.json");
  CHECK_THROWS_AS(Database::load(dir.path() / "isdir.json"), CacheError);
}

TEST_CASE("a database nested too deep is a CacheError, not a stack overflow", "[tuner][db]") {
  // The audit's file: 100000 nested arrays as an entry crashed dump(), which recursed.
  const auto nested = [](int depth) { return std::string(depth, '[') + std::string(depth, ']'); };
  for (const std::string& text :
       {R"({"format": 1, "entries": [)" + nested(100000) + "]}",
        R"({"format": 1, "entries": [{"arch": )" + nested(65) + "}]}", nested(100000)}) {
    INFO(text.substr(0, 60));
    CHECK_THROWS_WITH(Database::parse(text, "deep.json"),
                      Catch::Contains("deep.json") && Catch::Contains("nested more than 64") &&
                          Catch::Contains("delete or fix it"));
  }
  TempDir dir;
  const fs::path file = dir.path() / "tuning.json";
  std::ofstream(file) << R"({"format": 1, "entries": [)" << nested(100000) << "]}";
  CHECK_THROWS_AS(Database::load(file), CacheError);

  // Deep but within the limit: the entry is skipped and kept, as any entry that is not one.
  const std::string kept = R"({"format": 1, "entries": [)" + nested(60) + "]}";
  const Database db = Database::parse(kept, "kept.json");
  CHECK(db.entries().empty());
  CHECK(nlohmann::json::parse(db.dump())["entries"].size() == 1);
}

TEST_CASE("load reads only a regular file: a FIFO is an error, not a hang", "[tuner][db]") {
  TempDir dir;
  const fs::path fifo = dir.path() / "tuning.json";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  // In a child with an alarm, so that a load that blocks fails the test instead of hanging it.
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::alarm(20);
    int code = 1;  // returned without an error
    try {
      Database::load(fifo);
    } catch (const CacheError& e) {
      const std::string what = e.what();
      code = what.find("a FIFO, not a regular file") != std::string::npos &&
                     what.find(fifo.string()) != std::string::npos
                 ? 0
                 : 2;
    } catch (...) {
      code = 3;
    }
    ::_exit(code);
  }
  REQUIRE(pid > 0);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK_FALSE(WIFSIGNALED(status));  // SIGALRM: load blocked on the FIFO
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);

  if (fs::exists("/dev/null")) {
    CHECK_THROWS_WITH(Database::load("/dev/null"), Catch::Contains("a character device"));
  }
  // A link to a regular file is read as the file.
  const fs::path real = dir.path() / "real.json";
  std::ofstream(real) << R"({"format": 1, "entries": []})";
  fs::create_symlink(real, dir.path() / "link.json");
  CHECK(Database::load(dir.path() / "link.json").entries().empty());
}

TEST_CASE("save writes atomically and loads back", "[tuner][db]") {
  TempDir dir;
  const fs::path path = user_database_path(dir.path() / "cache" / "sub");
  CHECK(path == dir.path() / "cache" / "sub" / "tuning.json");

  const Family f = family();
  Database db;
  db.put(entry(h200(), f, causal_bucket(4096, 128), config(f, 128, 64, 4, 2), 351.75, 340.5));
  db.put(entry(h200(), family(Mask::none), Bucket{65536, 1, false},
               config(family(Mask::none), 64, 64, 4, 3), 1e-3, 2.5e6));
  db.save(path);  // creates the parent directories

  auto listing = [&] {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(path.parent_path())) {
      names.push_back(e.path().filename().string());
    }
    return names;
  };
  CHECK(listing() == std::vector<std::string>{"tuning.json"});
  require_same(Database::load(path).entries(), db.entries());

  // Saving again replaces the file, still without leftovers.
  Database smaller;
  smaller.put(db.entries()[0]);
  smaller.save(path);
  CHECK(listing() == std::vector<std::string>{"tuning.json"});
  require_same(Database::load(path).entries(), smaller.entries());

  // A parent that is a file: CacheError, not a crash.
  std::ofstream(dir.path() / "plain") << "x";
  CHECK_THROWS_AS(db.save(dir.path() / "plain" / "tuning.json"), CacheError);
}

TEST_CASE("save keeps entries it cannot read, links and permissions", "[tuner][db]") {
  TempDir dir;
  const fs::path real = dir.path() / "real" / "tuning.json";
  fs::create_directories(real.parent_path());
  nlohmann::json newer = entry_json();
  newer["precision"] = "fp4";  // written by a later ftattn
  std::ofstream(real) << db_text({entry_json(), newer});
  fs::permissions(real, fs::perms::owner_read | fs::perms::owner_write);  // 0600
  const fs::path link = dir.path() / "tuning.json";
  fs::create_symlink(real, link);

  Database db = Database::load(link);
  REQUIRE(db.entries().size() == 1);
  REQUIRE(db.unread().size() == 1);
  const Family f = family(Mask::none);
  db.put(entry(h200(), f, Bucket{2048, 64, false}, config(f, 128, 128, 8, 2)));
  db.save(link);

  CHECK(fs::is_symlink(fs::symlink_status(link)));  // still a link, its target replaced
  CHECK(fs::status(real).permissions() == (fs::perms::owner_read | fs::perms::owner_write));
  const Database back = Database::load(real);
  CHECK(back.entries().size() == 2);
  REQUIRE(back.unread().size() == 1);
  CHECK(nlohmann::json::parse(back.unread()[0]) == newer);
  for (const auto& e : fs::directory_iterator(real.parent_path()))
    CHECK(e.path().filename() == "tuning.json");  // no temp file left
}

TEST_CASE("fields a newer ftattn wrote into a readable entry are written back", "[tuner][db]") {
  TempDir dir;
  const fs::path path = dir.path() / "tuning.json";
  nlohmann::json richer = entry_json();
  richer["clock_mhz"] = 1980;  // fields this ftattn does not know
  richer["cuda_toolkit"] = "13.1";
  std::ofstream(path) << db_text({richer});
  REQUIRE(Database::load(path).entries().size() == 1);
  // tune's first step: the DB read and written back before any work. It dropped both fields.
  Database::update(path, Database{});
  std::ifstream in(path);
  const nlohmann::json back = nlohmann::json::parse(in);
  REQUIRE(back["entries"].size() == 1);
  CHECK(back["entries"][0] == richer);
}

TEST_CASE("update merges into the file under a lock, keeping others' entries", "[tuner][db]") {
  TempDir dir;
  const fs::path path = dir.path() / "tuning.json";
  const Family none = family(Mask::none), causal = family(Mask::causal);
  const Entry a = entry(h200(), none, Bucket{2048, 64, false}, config(none, 128, 128, 8, 2));
  const Entry b = entry(h200(), causal, causal_bucket(4096, 128), config(causal, 128, 64, 4, 2));
  const Entry b2 = entry(h200(), causal, causal_bucket(4096, 128), config(causal, 64, 64, 4, 2));

  Database::update(path, Database{});  // creates an empty file
  CHECK(Database::load(path).entries().empty());

  // Two runs that loaded the file before either saved: neither loses the other's entry.
  Database first, second;
  first.put(a);
  second.put(b);
  Database::update(path, first);
  Database::update(path, second);
  CHECK(Database::load(path).entries().size() == 2);

  // A later result for the same key replaces the earlier one.
  Database later;
  later.put(b2);
  Database::update(path, later);
  const Database back = Database::load(path);
  REQUIRE(back.entries().size() == 2);
  CHECK(back.find(h200(), causal, causal_bucket(4096, 128)) == b2.best);
  CHECK(back.find(h200(), none, Bucket{2048, 64, false}) == a.best);

  // A file it cannot parse is left alone: CacheError, nothing written over it.
  std::ofstream(path) << "{ not json";
  CHECK_THROWS_AS(Database::update(path, later), CacheError);
  std::ifstream in(path);
  CHECK(std::string(std::istreambuf_iterator<char>(in), {}) == "{ not json");
}

TEST_CASE("every shipped tuning database parses with no entry skipped", "[tuner][db]") {
  size_t total = 0;
  for (const auto& [name, text] : embedded_databases()) {
    INFO("tuner/db/" << name);
    CHECK(name.ends_with(".json"));
    Database db;
    REQUIRE_NOTHROW(db = Database::parse(text, std::string(name)));
    const nlohmann::json raw = nlohmann::json::parse(text);
    CHECK(db.entries().size() == raw.at("entries").size());
    CHECK(db.unread().empty());
    // Shipped files are kept in dump() form, so that re-tuning diffs cleanly.
    CHECK(db.dump() == std::string(text));
    total += db.entries().size();
  }
  // Files must not overlap either: merged, nothing is lost.
  CHECK(shipped().entries().size() == total);
}
