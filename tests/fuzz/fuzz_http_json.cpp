// libFuzzer harness: what the HTTP API does with a request body before any
// actor sees it (actors/http/http_json.hpp): the JSON parser, then every
// body reader (produce, topic create and patch, commit, queue receive and
// ack, offset reset), the value decoders (base64, UTF-8 check) and the
// integer parser of query strings and paths. Arbitrary bytes must give a
// value or a specific error, never a crash or an exception escaping. A
// produce body that parses must render back (render_message) without
// throwing, and base64 must round trip.

#include "actors/http/http_json.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in{reinterpret_cast<const char*>(data), size};
  (void) ferry::http_api::parse_int(in, -1, 1 << 30, "fuzz");
  (void) ferry::http_api::parse_encoding(in);
  (void) ferry::http_api::parse_acks(in);
  (void) ferry::http_api::valid_utf8(in);
  if (auto raw = ferry::http_api::base64_decode(in)) {
    auto again = ferry::http_api::base64_decode(ferry::http_api::base64_encode(*raw));
    if (!again || *again != *raw)
      std::abort();
  }
  auto body = ferry::http_api::parse_body(in);
  if (!body)
    return 0;
  const auto& j = *body;
  if (auto items = ferry::http_api::parse_produce(j, -1, 1700000000000, 1000)) {
    for (auto& item : *items)
      for (auto enc : {ferry::http_api::value_encoding::automatic, ferry::http_api::value_encoding::json,
                       ferry::http_api::value_encoding::string,
                       ferry::http_api::value_encoding::base64})
        (void) ferry::http_api::render_message(ferry::offset{0}, item.rec, enc).dump();
  }
  (void) ferry::http_api::parse_topic_spec(j);
  (void) ferry::http_api::parse_topic_patch(j);
  (void) ferry::http_api::parse_commit(j);
  (void) ferry::http_api::parse_queue_receive(j, "g", "t", 1000, 30000);
  for (auto kind : {ferry::queue_ack_kind::ack, ferry::queue_ack_kind::nack,
                    ferry::queue_ack_kind::reject, ferry::queue_ack_kind::extend})
    (void) ferry::http_api::parse_queue_ack(j, "g", "t", kind);
  (void) ferry::http_api::parse_reset(j, "g");
  return 0;
}
