#include "actors/http/http_json.hpp"

#include "broker/start_position.hpp"
#include "broker/topic_config.hpp"

#include <caf/atom.hpp>
#include <caf/sec.hpp>

#include <algorithm>
#include <array>
#include <charconv>
#include <limits>
#include <set>
#include <utility>

namespace ferry::http_api {

namespace {

/// Stored values nest at most this deep to be rendered as JSON: nlohmann's
/// dump() recurses, and a client must not be able to blow the stack.
constexpr size_t max_json_depth = 256;

caf::error bad(std::string msg) {
  return make_error(ec::invalid_request, std::move(msg));
}

/// The nesting depth of JSON text (brackets outside strings).
size_t json_depth(std::string_view text) {
  size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        break;
      case '[':
      case '{':
        deepest = std::max(deepest, ++depth);
        break;
      case ']':
      case '}':
        if (depth > 0)
          --depth;
        break;
      default:
        break;
    }
  }
  return deepest;
}

/// Parses JSON text without exceptions; nullopt if invalid or too deep.
std::optional<json> try_parse(std::string_view text) {
  if (json_depth(text) > max_json_depth)
    return std::nullopt;
  auto j = json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded())
    return std::nullopt;
  return j;
}

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

/// An integer JSON value as int64 (floats and out-of-range values: none).
std::optional<int64_t> as_int(const json& j) {
  if (!j.is_number_integer())
    return std::nullopt;
  if (j.is_number_unsigned()
      && j.get<uint64_t>()
           > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    return std::nullopt;
  return j.get<int64_t>();
}

/// An optional integer field in [lo, hi].
caf::error int_field(const json& obj, const char* name, int64_t lo, int64_t hi,
                     std::optional<int64_t>& out, std::string_view where = {}) {
  auto i = obj.find(name);
  if (i == obj.end() || i->is_null())
    return {};
  auto v = as_int(*i);
  if (!v || *v < lo || *v > hi)
    return bad(std::string{where} + "\"" + name + "\" must be an integer in ["
               + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  out = *v;
  return {};
}

caf::error string_field(const json& obj, const char* name,
                        std::optional<std::string>& out,
                        std::string_view where = {}) {
  auto i = obj.find(name);
  if (i == obj.end() || i->is_null())
    return {};
  if (!i->is_string())
    return bad(std::string{where} + "\"" + name + "\" must be a string");
  out = i->get<std::string>();
  return {};
}

/// The bytes of a key or header value given as a JSON string, decoded per
/// its encoding ("string" or "base64").
caf::expected<std::string> text_bytes(const json& j, value_encoding enc,
                                      const std::string& what) {
  if (!j.is_string())
    return bad(what + " must be a string");
  auto s = j.get<std::string>();
  if (enc != value_encoding::base64)
    return s;
  auto b = base64_decode(s);
  if (!b)
    return bad(what + " is not valid base64");
  return std::move(*b);
}

caf::expected<std::optional<std::string>>
value_bytes(const json& v, std::optional<value_encoding> enc,
            const std::string& where) {
  if (!enc) {
    if (v.is_null())
      return std::optional<std::string>{};
    if (v.is_string())
      return std::optional<std::string>{v.get<std::string>()};
    return std::optional<std::string>{dump(v)};
  }
  switch (*enc) {
    case value_encoding::json:
    case value_encoding::automatic:
      return std::optional<std::string>{dump(v)};
    case value_encoding::string:
      if (v.is_null())
        return std::optional<std::string>{};
      if (!v.is_string())
        return bad(where + "\"value\" must be a string with encoding string");
      return std::optional<std::string>{v.get<std::string>()};
    case value_encoding::base64: {
      if (v.is_null())
        return std::optional<std::string>{};
      if (!v.is_string())
        return bad(where + "\"value\" must be a base64 string with encoding "
                           "base64");
      auto b = base64_decode(v.get<std::string>());
      if (!b)
        return bad(where + "\"value\" is not valid base64");
      return std::optional<std::string>{std::move(*b)};
    }
  }
  return bad(where + "unknown encoding");
}

caf::expected<std::vector<record_header>>
parse_headers(const json& h, value_encoding enc, const std::string& where) {
  std::vector<record_header> out;
  if (h.is_null())
    return out;
  auto one = [&](const std::string& key, const json& v) -> caf::error {
    record_header rh;
    rh.key = key;
    if (!v.is_null()) {
      auto b = text_bytes(v, enc, where + "header '" + key + "'");
      if (!b)
        return std::move(b.error());
      rh.value = std::move(*b);
    }
    out.push_back(std::move(rh));
    return {};
  };
  if (h.is_object()) {
    for (auto& [k, v] : h.items())
      if (auto err = one(k, v))
        return err;
    return out;
  }
  if (h.is_array()) {
    for (auto& e : h) {
      if (!e.is_object() || !e.contains("key") || !e["key"].is_string())
        return bad(where + "\"headers\" entries must be {\"key\",\"value\"}");
      auto v = e.find("value");
      if (auto err = one(e["key"].get<std::string>(),
                         v == e.end() ? json{} : *v))
        return err;
    }
    return out;
  }
  return bad(where + "\"headers\" must be an object or an array");
}

caf::expected<produce_item> parse_record(const json& r, int32_t partition,
                                         timestamp_ms now,
                                         const std::string& where) {
  if (!r.is_object())
    return bad(where + "must be an object");
  produce_item item;
  item.partition = partition;
  std::optional<int64_t> p;
  if (auto err = int_field(r, "partition", 0,
                           std::numeric_limits<int32_t>::max(), p, where))
    return err;
  if (p)
    item.partition = static_cast<int32_t>(*p);
  std::optional<int64_t> ts;
  if (auto err = int_field(r, "timestamp", 0,
                           std::numeric_limits<int64_t>::max(), ts, where))
    return err;
  item.rec.timestamp = ts ? *ts : now;
  // Encodings.
  std::optional<std::string> enc_text, key_enc_text, headers_enc_text;
  if (auto err = string_field(r, "encoding", enc_text, where))
    return err;
  if (auto err = string_field(r, "keyEncoding", key_enc_text, where))
    return err;
  if (auto err = string_field(r, "headersEncoding", headers_enc_text, where))
    return err;
  std::optional<value_encoding> enc;
  if (enc_text) {
    enc = parse_encoding(*enc_text);
    if (!enc || *enc == value_encoding::automatic)
      return bad(where + "\"encoding\" must be json, string or base64, not '"
                 + *enc_text + "'");
  }
  auto key_enc = value_encoding::string;
  if (key_enc_text) {
    auto k = parse_encoding(*key_enc_text);
    if (!k || (*k != value_encoding::string && *k != value_encoding::base64))
      return bad(where + "\"keyEncoding\" must be string or base64, not '"
                 + *key_enc_text + "'");
    key_enc = *k;
  }
  auto headers_enc = value_encoding::string;
  if (headers_enc_text) {
    auto k = parse_encoding(*headers_enc_text);
    if (!k || (*k != value_encoding::string && *k != value_encoding::base64))
      return bad(where + "\"headersEncoding\" must be string or base64, not '"
                 + *headers_enc_text + "'");
    headers_enc = *k;
  }
  // Key: a string (or any other JSON value, stored as its JSON text).
  if (auto k = r.find("key"); k != r.end() && !k->is_null()) {
    if (k->is_string()) {
      auto b = text_bytes(*k, key_enc, where + "\"key\"");
      if (!b)
        return std::move(b.error());
      item.rec.key = std::move(*b);
    } else {
      if (key_enc == value_encoding::base64)
        return bad(where + "\"key\" must be a base64 string");
      item.rec.key = dump(*k);
    }
  }
  auto v = r.find("value");
  if (v == r.end())
    return bad(where + "\"value\" is missing (use null for a tombstone)");
  auto vb = value_bytes(*v, enc, where);
  if (!vb)
    return std::move(vb.error());
  item.rec.value = std::move(*vb);
  if (auto h = r.find("headers"); h != r.end()) {
    auto hs = parse_headers(*h, headers_enc, where);
    if (!hs)
      return std::move(hs.error());
    item.rec.headers = std::move(*hs);
  }
  return item;
}

constexpr char b64_chars[]
  = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

json partition_json(const partition_assignment& p) {
  return json{{"partition", p.partition.value},
              {"leader", p.leader},
              {"leaderEpoch", p.epoch.value},
              {"replicas", p.replicas},
              {"isr", p.isr}};
}

json partition_json(const partition_status& p) {
  json j{{"partition", p.partition.value},
              {"leader", p.leader},
              {"leaderEpoch", p.epoch.value},
              {"replicas", p.replicas},
              {"isr", p.isr},
              {"logStartOffset", p.log_start.value},
              {"logEndOffset", p.log_end.value},
              {"highWatermark", p.high_watermark.value},
              {"sizeBytes", p.size_bytes},
              {"online", p.online}};
  if (p.dirty_ratio >= 0) {
    j["dirtyRatio"] = p.dirty_ratio;
    j["lastCleanMs"] = p.last_clean_ms;
  }
  return j;
}

/// A stored value rendered per `enc`; sets "encoding" on `m`.
void render_value(json& m, const std::string& bytes, value_encoding enc) {
  if (enc == value_encoding::automatic || enc == value_encoding::json) {
    if (auto j = try_parse(bytes)) {
      // A scalar is JSON only if it renders back to the same bytes: "007"
      // or " 42" are strings, and huge integers would lose digits.
      if (j->is_structured() || dump(*j) == bytes) {
        m["value"] = std::move(*j);
        m["encoding"] = "json";
        return;
      }
    }
  }
  if (enc != value_encoding::base64 && valid_utf8(bytes)) {
    m["value"] = bytes;
    m["encoding"] = "string";
    return;
  }
  m["value"] = base64_encode(bytes);
  m["encoding"] = "base64";
}

} // namespace

// -- errors -------------------------------------------------------------------

unsigned status_of(ec code) {
  switch (code) {
    case ec::none:
      return 200;
    case ec::truncated_batch:
    case ec::crc_mismatch:
    case ec::bad_magic:
    case ec::bad_varint:
    case ec::length_overflow:
    case ec::malformed_record:
    case ec::unsupported_compression:
    case ec::decompression_failed:
    case ec::invalid_argument:
    case ec::invalid_topic_name:
    case ec::invalid_config:
    case ec::policy_violation:
    case ec::invalid_request:
      return 400;
    case ec::unknown_topic:
    case ec::unknown_partition:
    case ec::unknown_group:
    case ec::unknown_member:
    case ec::not_found:
    case ec::lease_not_found:
    case ec::unknown_user:
      return 404;
    case ec::authentication_failed:
      return 401;
    case ec::authorization_failed:
      return 403;
    case ec::topic_exists:
    case ec::group_not_empty:
    case ec::rebalance_in_progress:
    case ec::illegal_generation:
    case ec::fenced_instance_id:
    case ec::not_lease_owner:
    case ec::inconsistent_group_protocol:
    case ec::out_of_order_sequence:
    case ec::invalid_producer_epoch:
    case ec::unknown_producer_id:
      return 409;
    case ec::lease_expired:
      return 410;
    case ec::message_too_large:
      return 413;
    case ec::offset_out_of_range:
      return 416;
    case ec::throttled:
    case ec::login_throttled:
      return 429;
    case ec::not_leader:
    case ec::coordinator_not_available:
    case ec::not_enough_replicas:
    case ec::fenced_leader_epoch:
    case ec::log_closed:
    case ec::security_loading:
      return 503;
    case ec::request_timed_out:
      return 504;
    case ec::disk_full:
      return 507;
    case ec::io_error:
    case ec::corrupt_segment:
    case ec::lmdb_error:
    case ec::unknown_record_kind:
      return 500;
  }
  return 500;
}

api_error to_api_error(const caf::error& err) {
  api_error out;
  if (!err) {
    out.status = 500;
    out.code = "io_error";
    out.message = "unknown error";
    return out;
  }
  const auto& ctx = err.context();
  std::string context;
  if (ctx.size() == 1 && ctx.match_element<std::string>(0))
    context = ctx.get_as<std::string>(0);
  else if (!ctx.empty())
    context = caf::to_string(ctx);
  if (err.category() == ferry_category()) {
    auto code = static_cast<ec>(err.code());
    out.status = status_of(code);
    out.code = to_string(code);
    out.message = context.empty() ? out.code : context;
    return out;
  }
  if (err.category() == caf::atom("system")) {
    auto s = static_cast<caf::sec>(err.code());
    if (s == caf::sec::request_timeout) {
      out.status = 504;
      out.code = to_string(ec::request_timed_out);
      out.message = "the broker did not answer in time";
      return out;
    }
    out.status = 503;
    out.code = to_string(ec::not_leader);
    out.message = "the broker is not available: " + caf::to_string(s);
    if (!context.empty())
      out.message += ": " + context;
    return out;
  }
  out.status = 503;
  out.code = to_string(ec::not_leader);
  out.message = "the broker is not available: " + caf::to_string(err);
  return out;
}

json error_body(const std::string& code, const std::string& message) {
  return json{{"error", {{"code", code}, {"message", message}}}};
}

// -- small parsers ----------------------------------------------------------------

caf::expected<int64_t> parse_int(std::string_view text, int64_t lo, int64_t hi,
                                 std::string_view what) {
  auto fail = [&] {
    return bad(std::string{what} + " must be an integer in ["
               + std::to_string(lo) + ", " + std::to_string(hi) + "], not '"
               + std::string{text.substr(0, 64)} + "'");
  };
  if (text.empty() || (text[0] == '-' && lo >= 0) || text[0] == '+')
    return fail();
  int64_t v = 0;
  auto [ptr, errc] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (errc != std::errc{} || ptr != text.data() + text.size() || v < lo
      || v > hi)
    return fail();
  return v;
}

caf::expected<json> parse_body(std::string_view body) {
  if (body.empty())
    return bad("the request needs a JSON body");
  if (json_depth(body) > max_json_depth)
    return bad("the JSON body nests deeper than "
               + std::to_string(max_json_depth) + " levels");
  try {
    return json::parse(body.begin(), body.end());
  } catch (const json::exception& e) {
    return bad(std::string{"malformed JSON: "} + e.what());
  }
}

// -- value encodings --------------------------------------------------------------

std::optional<value_encoding> parse_encoding(std::string_view text) {
  if (text == "auto")
    return value_encoding::automatic;
  if (text == "json")
    return value_encoding::json;
  if (text == "string")
    return value_encoding::string;
  if (text == "base64")
    return value_encoding::base64;
  return std::nullopt;
}

const char* to_string(value_encoding x) {
  switch (x) {
    case value_encoding::automatic: return "auto";
    case value_encoding::json: return "json";
    case value_encoding::string: return "string";
    case value_encoding::base64: return "base64";
  }
  return "auto";
}

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  auto at = [&](size_t k) { return static_cast<uint32_t>(static_cast<uint8_t>(bytes[k])); };
  for (; i + 3 <= bytes.size(); i += 3) {
    uint32_t n = (at(i) << 16) | (at(i + 1) << 8) | at(i + 2);
    out += b64_chars[(n >> 18) & 63];
    out += b64_chars[(n >> 12) & 63];
    out += b64_chars[(n >> 6) & 63];
    out += b64_chars[n & 63];
  }
  auto rest = bytes.size() - i;
  if (rest == 1) {
    uint32_t n = at(i) << 16;
    out += b64_chars[(n >> 18) & 63];
    out += b64_chars[(n >> 12) & 63];
    out += "==";
  } else if (rest == 2) {
    uint32_t n = (at(i) << 16) | (at(i + 1) << 8);
    out += b64_chars[(n >> 18) & 63];
    out += b64_chars[(n >> 12) & 63];
    out += b64_chars[(n >> 6) & 63];
    out += '=';
  }
  return out;
}

std::optional<std::string> base64_decode(std::string_view text) {
  static const auto table = [] {
    std::array<int8_t, 256> t{};
    t.fill(-1);
    for (int i = 0; i < 64; ++i)
      t[static_cast<uint8_t>(b64_chars[i])] = static_cast<int8_t>(i);
    t[static_cast<uint8_t>('-')] = 62;
    t[static_cast<uint8_t>('_')] = 63;
    return t;
  }();
  while (!text.empty() && text.back() == '=')
    text.remove_suffix(1);
  if (text.size() % 4 == 1)
    return std::nullopt;
  std::string out;
  out.reserve(text.size() * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    auto v = table[static_cast<uint8_t>(c)];
    if (v < 0)
      return std::nullopt;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  return out;
}

bool valid_utf8(std::string_view s) {
  size_t i = 0;
  auto n = s.size();
  auto byte = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  while (i < n) {
    auto c = byte(i);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    uint32_t cp = 0;
    if ((c & 0xe0) == 0xc0) {
      len = 2;
      cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3;
      cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > n)
      return false;
    for (size_t k = 1; k < len; ++k) {
      auto cc = byte(i + k);
      if ((cc & 0xc0) != 0x80)
        return false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800)
        || (len == 4 && cp < 0x10000) || cp > 0x10ffff
        || (cp >= 0xd800 && cp <= 0xdfff))
      return false;
    i += len;
  }
  return true;
}

// -- produce ------------------------------------------------------------------

caf::expected<std::vector<produce_item>>
parse_produce(const json& body, int32_t default_partition, timestamp_ms now,
              size_t max_records) {
  if (!body.is_object())
    return bad("the body must be a JSON object: a record or {\"records\":[...]}");
  std::vector<produce_item> out;
  auto recs = body.find("records");
  if (recs == body.end()) {
    auto item = parse_record(body, default_partition, now, "record: ");
    if (!item)
      return std::move(item.error());
    out.push_back(std::move(*item));
    return out;
  }
  if (!recs->is_array() || recs->empty())
    return bad("\"records\" must be a non-empty array");
  if (recs->size() > max_records)
    return bad("at most " + std::to_string(max_records)
               + " records per request");
  out.reserve(recs->size());
  size_t i = 0;
  for (auto& r : *recs) {
    auto item = parse_record(r, default_partition, now,
                             "records[" + std::to_string(i) + "]: ");
    if (!item)
      return std::move(item.error());
    out.push_back(std::move(*item));
    ++i;
  }
  return out;
}

std::optional<acks_mode> parse_acks(std::string_view text) {
  if (text == "0")
    return acks_mode::none;
  if (text == "1")
    return acks_mode::leader;
  if (text == "all" || text == "-1")
    return acks_mode::all;
  return std::nullopt;
}

// -- fetch --------------------------------------------------------------------

json render_message(offset off, const record& rec, value_encoding enc) {
  json m = json::object();
  m["offset"] = off.value;
  m["timestamp"] = rec.timestamp;
  if (!rec.key) {
    m["key"] = nullptr;
  } else if (valid_utf8(*rec.key)) {
    m["key"] = *rec.key;
  } else {
    m["key"] = base64_encode(*rec.key);
    m["keyEncoding"] = "base64";
  }
  if (rec.value)
    render_value(m, *rec.value, enc);
  else
    m["value"] = nullptr;
  bool utf8 = std::all_of(rec.headers.begin(), rec.headers.end(),
                          [](const record_header& h) {
                            return !h.value || valid_utf8(*h.value);
                          });
  json hs = json::object();
  for (auto& h : rec.headers) {
    if (!h.value)
      hs[h.key] = nullptr;
    else
      hs[h.key] = utf8 ? *h.value : base64_encode(*h.value);
  }
  m["headers"] = std::move(hs);
  if (!utf8)
    m["headersEncoding"] = "base64";
  return m;
}

caf::expected<rendered_messages>
render_messages(const fetch_response& resp, offset from, size_t limit,
                value_encoding enc) {
  rendered_messages out;
  out.next = resp.next_offset;
  std::string_view data = resp.data;
  size_t count = 0;
  while (!data.empty()) {
    auto hdr = parse_batch_header(data);
    if (!hdr)
      return make_error(ec::corrupt_segment,
                        "a fetched batch is damaged: " + describe(hdr.error()));
    auto one = data.substr(0, hdr->total_size());
    data.remove_prefix(one.size());
    if (hdr->control() || hdr->next_offset() <= from)
      continue;
    auto dec = decode_batch(one);
    if (!dec)
      return make_error(ec::corrupt_segment,
                        "batch at offset "
                          + std::to_string(hdr->base_offset.value)
                          + " is damaged: " + describe(dec.error()));
    for (auto& rec : dec->records) {
      auto off = hdr->base_offset + rec.offset_delta;
      if (off < from)
        continue;
      if (count == limit) {
        out.next = off;
        return out;
      }
      out.messages.push_back(render_message(off, rec, enc));
      ++count;
    }
  }
  return out;
}

// -- topics, groups, cluster --------------------------------------------------------

caf::expected<topic_spec> parse_topic_spec(const json& body) {
  if (!body.is_object())
    return bad("the body must be a JSON object {\"name\",\"partitions\","
               "\"replicationFactor\",\"config\"}");
  topic_spec out;
  std::optional<std::string> name;
  if (auto err = string_field(body, "name", name))
    return err;
  if (!name)
    return bad("\"name\" is missing");
  out.name = std::move(*name);
  std::optional<int64_t> parts, rf;
  if (auto err = int_field(body, "partitions", std::numeric_limits<int32_t>::min(),
                           std::numeric_limits<int32_t>::max(), parts))
    return err;
  if (auto err = int_field(body, "replicationFactor",
                           std::numeric_limits<int16_t>::min(),
                           std::numeric_limits<int16_t>::max(), rf))
    return err;
  out.config.partitions = parts ? static_cast<int32_t>(*parts) : 1;
  out.config.replication_factor = rf ? static_cast<int16_t>(*rf) : 1;
  if (auto c = body.find("config"); c != body.end() && !c->is_null()) {
    if (!c->is_object())
      return bad("\"config\" must be an object of config keys");
    for (auto& [k, v] : c->items()) {
      std::string text;
      if (auto n = as_int(v))
        text = std::to_string(*n);
      else if (v.is_string())
        text = v.get<std::string>();
      else
        return make_error(ec::invalid_config,
                          "config '" + k + "' must be an integer");
      if (auto err = set_topic_config_value(out.config, k, text))
        return err;
    }
  }
  return out;
}

caf::expected<topic_patch> parse_topic_patch(const json& body) {
  if (!body.is_object())
    return bad("the body must be a JSON object {\"config\",\"partitions\"}");
  topic_patch out;
  std::optional<int64_t> parts;
  if (auto err = int_field(body, "partitions", 1,
                           std::numeric_limits<int32_t>::max(), parts))
    return err;
  if (parts)
    out.partitions = static_cast<int32_t>(*parts);
  if (auto c = body.find("config"); c != body.end() && !c->is_null()) {
    if (!c->is_object())
      return bad("\"config\" must be an object of config keys");
    for (auto& [k, v] : c->items()) {
      if (auto n = as_int(v))
        out.config[k] = std::to_string(*n);
      else if (v.is_string())
        out.config[k] = v.get<std::string>();
      else
        return make_error(ec::invalid_config,
                          "config '" + k + "' must be an integer");
    }
  }
  if (out.config.empty() && !out.partitions)
    return bad("nothing to change: give \"config\" and/or \"partitions\"");
  return out;
}

caf::expected<std::vector<partition_offset>> parse_commit(const json& body) {
  if (!body.is_object())
    return bad("the body must be a JSON object {\"topic\",\"partition\","
               "\"offset\"} or {\"offsets\":[...]}");
  auto one = [](const json& o,
                const std::string& where) -> caf::expected<partition_offset> {
    if (!o.is_object())
      return bad(where + "must be an object");
    std::optional<std::string> topic, meta;
    std::optional<int64_t> p, off;
    if (auto err = string_field(o, "topic", topic, where))
      return err;
    if (auto err = int_field(o, "partition", 0,
                             std::numeric_limits<int32_t>::max(), p, where))
      return err;
    if (auto err = int_field(o, "offset", 0,
                             std::numeric_limits<int64_t>::max(), off, where))
      return err;
    if (auto err = string_field(o, "metadata", meta, where))
      return err;
    if (!topic || topic->empty() || !p || !off)
      return bad(where + "\"topic\", \"partition\" and \"offset\" are required");
    return partition_offset{*topic, partition_id{static_cast<int32_t>(*p)},
                            offset{*off}, meta.value_or("")};
  };
  std::vector<partition_offset> out;
  if (auto list = body.find("offsets"); list != body.end()) {
    if (!list->is_array() || list->empty())
      return bad("\"offsets\" must be a non-empty array");
    size_t i = 0;
    for (auto& o : *list) {
      auto po = one(o, "offsets[" + std::to_string(i++) + "]: ");
      if (!po)
        return std::move(po.error());
      out.push_back(std::move(*po));
    }
    return out;
  }
  auto po = one(body, "");
  if (!po)
    return std::move(po.error());
  out.push_back(std::move(*po));
  return out;
}

// -- queue mode -----------------------------------------------------------------

caf::expected<queue_receive_request>
parse_queue_receive(const json& body, const std::string& group,
                    const std::string& topic, int32_t max_records,
                    int64_t max_wait_ms) {
  if (!body.is_object())
    return bad("the body must be a JSON object {\"member\",\"max\","
               "\"visibilityMs\",\"waitMs\",\"topics\"}");
  queue_receive_request req;
  req.group = group;
  req.topic = topic;
  if (auto ts = body.find("topics"); ts != body.end() && !ts->is_null()) {
    auto names = "\"topics\" must be an array of topic names";
    if (!ts->is_array())
      return bad(names);
    for (auto& t : *ts) {
      if (!t.is_string() || t.get_ref<const std::string&>().empty())
        return bad(names);
      req.topics.push_back(t.get<std::string>());
    }
  }
  if (topic.empty() && req.topics.empty())
    return bad("\"topics\" is required (the topics to receive from)");
  if (receive_topics(req).size() > max_receive_topics)
    return bad("at most " + std::to_string(max_receive_topics)
               + " topics in one receive");
  std::optional<std::string> member;
  std::optional<int64_t> max, vis, wait;
  if (auto err = string_field(body, "member", member))
    return err;
  if (!member || member->empty())
    return bad("\"member\" is required (a non-empty string)");
  if (auto err = int_field(body, "max", 1, max_records, max))
    return err;
  if (auto err = int_field(body, "visibilityMs", 0,
                           std::numeric_limits<int32_t>::max(), vis))
    return err;
  if (auto err = int_field(body, "waitMs", 0, max_wait_ms, wait))
    return err;
  req.member_id = std::move(*member);
  req.max_records = static_cast<int32_t>(max.value_or(100));
  req.visibility_ms = vis.value_or(0);
  req.wait_ms = wait.value_or(0);
  return req;
}

caf::expected<std::vector<queue_ack_request>>
parse_queue_ack_batch(const json& body, const std::string& group,
                      const std::string& topic, queue_ack_kind kind) {
  auto shape = "\"records\" must be an array of 1 to "
               + std::to_string(max_settle_batch)
               + " objects {\"topic\",\"partition\",\"offset\",\"leaseId\",...}";
  if (!body.is_object())
    return bad(shape);
  auto recs = body.find("records");
  if (recs == body.end() || !recs->is_array() || recs->empty()
      || recs->size() > max_settle_batch)
    return bad(shape);
  std::optional<std::string> member, outer_topic;
  if (auto err = string_field(body, "member", member))
    return err;
  if (auto err = string_field(body, "topic", outer_topic))
    return err;
  auto default_topic = topic.empty() ? outer_topic.value_or("") : topic;
  std::vector<queue_ack_request> out;
  out.reserve(recs->size());
  for (size_t i = 0; i < recs->size(); ++i) {
    auto one = (*recs)[i];
    if (!one.is_object())
      return bad(shape);
    if (member && !one.contains("member"))
      one["member"] = *member;
    auto req = parse_queue_ack(one, group, one.contains("topic") ? "" : default_topic,
                               kind);
    if (!req)
      return bad("records[" + std::to_string(i)
                 + "]: " + to_api_error(req.error()).message);
    out.push_back(std::move(*req));
  }
  return out;
}

caf::expected<queue_ack_request> parse_queue_ack(const json& body,
                                                 const std::string& group,
                                                 const std::string& topic,
                                                 queue_ack_kind kind) {
  if (!body.is_object())
    return bad("the body must be a JSON object {\"member\",\"partition\","
               "\"offset\",\"leaseId\",...}");
  queue_ack_request req;
  req.group = group;
  req.topic = topic;
  req.kind = kind;
  if (topic.empty()) {
    std::optional<std::string> t;
    if (auto err = string_field(body, "topic", t))
      return err;
    if (!t || t->empty())
      return bad("\"topic\" is required (the record's topic)");
    req.topic = std::move(*t);
  }
  std::optional<std::string> member, error;
  std::optional<int64_t> p, off, delay, extend;
  if (auto err = string_field(body, "member", member))
    return err;
  if (auto err = int_field(body, "partition", 0,
                           std::numeric_limits<int32_t>::max(), p))
    return err;
  if (auto err = int_field(body, "offset", 0,
                           std::numeric_limits<int64_t>::max(), off))
    return err;
  if (auto err = int_field(body, "delayMs", 0,
                           std::numeric_limits<int32_t>::max(), delay))
    return err;
  if (auto err = int_field(body, "extendMs", 1,
                           std::numeric_limits<int32_t>::max(), extend))
    return err;
  if (auto err = string_field(body, "error", error))
    return err;
  std::optional<uint64_t> lease;
  if (auto i = body.find("leaseId"); i != body.end() && !i->is_null()) {
    if (i->is_number_unsigned()) {
      lease = i->get<uint64_t>();
    } else if (i->is_number_integer() && i->get<int64_t>() > 0) {
      lease = static_cast<uint64_t>(i->get<int64_t>());
    } else if (i->is_string()) {
      auto s = i->get<std::string>();
      uint64_t v = 0;
      bool ok = !s.empty() && s.size() <= 20;
      for (char c : s) {
        if (c < '0' || c > '9') {
          ok = false;
          break;
        }
        auto d = static_cast<uint64_t>(c - '0');
        if (v > (std::numeric_limits<uint64_t>::max() - d) / 10) {
          ok = false;
          break;
        }
        v = v * 10 + d;
      }
      if (ok)
        lease = v;
    }
    if (!lease || *lease == 0)
      return bad("\"leaseId\" must be a positive integer or a decimal string");
  }
  if (!member || member->empty() || !p || !off || !lease)
    return bad("\"member\", \"partition\", \"offset\" and \"leaseId\" are "
               "required");
  if (kind == queue_ack_kind::extend && !extend)
    return bad("\"extendMs\" is required for extend");
  req.member_id = std::move(*member);
  req.partition = partition_id{static_cast<int32_t>(*p)};
  req.off = offset{*off};
  req.lease_id = *lease;
  req.delay_ms = delay.value_or(0);
  req.extend_ms = extend.value_or(0);
  req.error = error.value_or("");
  return req;
}

json to_json(const std::vector<leased_message>& xs, value_encoding enc) {
  json out = json::array();
  for (auto& x : xs) {
    auto& m = x.message;
    record rec;
    rec.timestamp = m.timestamp;
    if (m.has_key)
      rec.key = m.key;
    if (m.has_value)
      rec.value = m.value;
    for (auto& h : m.headers)
      rec.headers.push_back(record_header{h.key, h.value});
    auto j = render_message(m.off, rec, enc);
    j["topic"] = m.topic;
    j["partition"] = m.partition.value;
    j["leaseId"] = std::to_string(x.lease_id);
    j["attempt"] = x.attempt;
    j["deadline"] = x.deadline;
    out.push_back(std::move(j));
  }
  return json{{"records", std::move(out)}};
}

json to_json(const queue_ack_response& x, queue_ack_kind kind) {
  switch (kind) {
    case queue_ack_kind::ack:
      return json{{"result", "ack"}};
    case queue_ack_kind::extend:
      return json{{"result", "extend"}, {"deadline", x.deadline}};
    case queue_ack_kind::reject:
      return json{{"result", "reject"},
                  {"attempts", x.attempts},
                  {"deadLetter", x.dead_letter}};
    default:
      break;
  }
  json j{{"result", "nack"},
         {"attempts", x.attempts},
         {"deadLetter", x.dead_letter}};
  if (!x.dead_letter)
    j["retryAt"] = x.retry_at;
  return j;
}

caf::expected<reset_offsets_request> parse_reset(const json& body,
                                                 const std::string& group) {
  if (!body.is_object())
    return bad("the body must be a JSON object {\"topic\",\"to\",\"value\","
               "\"dryRun\"}");
  reset_offsets_request req;
  req.group = group;
  std::optional<std::string> topic, to;
  if (auto err = string_field(body, "topic", topic))
    return err;
  if (topic)
    req.topics.push_back(*topic);
  if (auto ts = body.find("topics"); ts != body.end() && !ts->is_null()) {
    if (!ts->is_array())
      return bad("\"topics\" must be an array of names");
    for (auto& t : *ts) {
      if (!t.is_string())
        return bad("\"topics\" must be an array of names");
      req.topics.push_back(t.get<std::string>());
    }
  }
  if (auto err = string_field(body, "to", to))
    return err;
  if (!to)
    return bad("\"to\" is missing: earliest, latest, timestamp or offset");
  if (*to != "earliest" && *to != "latest" && *to != "timestamp"
      && *to != "offset")
    return bad("\"to\" must be earliest, latest, timestamp or offset, not '"
               + *to + "'");
  req.to = *to;
  std::optional<int64_t> value;
  if (auto err = int_field(body, "value", 0,
                           std::numeric_limits<int64_t>::max(), value))
    return err;
  if ((*to == "timestamp" || *to == "offset") && !value)
    return bad("\"value\" is required with \"to\":\"" + *to + "\"");
  req.value = value.value_or(0);
  if (auto d = body.find("dryRun"); d != body.end() && !d->is_null()) {
    if (!d->is_boolean())
      return bad("\"dryRun\" must be true or false");
    req.dry_run = d->get<bool>();
  }
  return req;
}

json to_json(const topic_config& x) {
  return json{{"retention.ms", x.retention_ms},
              {"retention.bytes", x.retention_bytes},
              {"segment.bytes", x.segment_bytes},
              {"segment.ms", x.segment_ms},
              {"max.message.bytes", x.max_message_bytes},
              {"min.insync.replicas", x.min_insync_replicas},
              {"cleanup.policy", cleanup_policy_name(x.cleanup_policy)},
              {"min.cleanable.dirty.ratio", x.min_cleanable_dirty_ratio},
              {"min.compaction.lag.ms", x.min_compaction_lag_ms},
              {"max.compaction.lag.ms", x.max_compaction_lag_ms},
              {"delete.retention.ms", x.delete_retention_ms}};
}

json to_json(const topic_metadata& x) {
  json parts = json::array();
  for (auto& p : x.partitions)
    parts.push_back(partition_json(p));
  return json{{"name", x.name},
              {"partitionCount", x.partitions.empty()
                                   ? x.config.partitions
                                   : static_cast<int32_t>(x.partitions.size())},
              {"replicationFactor", x.config.replication_factor},
              {"config", to_json(x.config)},
              {"partitions", std::move(parts)}};
}

json to_json(const topic_description& x) {
  json parts = json::array();
  for (auto& p : x.partitions)
    parts.push_back(partition_json(p));
  return json{{"name", x.name},
              {"partitionCount", static_cast<int32_t>(x.partitions.size())},
              {"replicationFactor", x.config.replication_factor},
              {"config", to_json(x.config)},
              {"partitions", std::move(parts)}};
}

json to_json(const cluster_description& x) {
  json nodes = json::array();
  for (auto& n : x.nodes)
    nodes.push_back(json{{"id", n.id},
                         {"host", n.host},
                         {"port", n.port},
                         {"httpPort", n.http_port},
                         {"metricsPort", n.metrics_port},
                         {"kafkaPort", n.kafka_port},
                         {"kafkaHost", n.kafka_host},
                         {"alive", n.alive},
                         {"controller", n.controller},
                         {"role", n.voter ? "voter" : "broker"},
                         {"removing", n.removing}});
  json topics = json::array();
  for (auto& t : x.topics)
    topics.push_back(to_json(t));
  return json{{"clusterId", x.cluster_id},
              {"controller", x.controller},
              {"raftTerm", x.raft_term},
              {"nodes", std::move(nodes)},
              {"topics", std::move(topics)}};
}

caf::expected<queue_group_config> parse_queue_config(const json& body,
                                                     queue_group_config base) {
  if (!body.is_object())
    return bad("the body must be a JSON object of queue settings (maxAttempts, "
               "initialBackoffMs, maxBackoffMs, backoffMultiplier, jitter, "
               "visibilityTimeoutMs, ordering, dlqTopic, start, delayMs)");
  static const std::set<std::string> known{
    "maxAttempts",         "initialBackoffMs", "maxBackoffMs", "backoffMultiplier",
    "jitter",              "visibilityTimeoutMs", "ordering",  "dlqTopic",
    "start",               "delayMs"};
  for (auto& [k, v] : body.items())
    if (known.count(k) == 0)
      return bad("unknown queue setting \"" + k + "\"");
  auto qc = base;
  std::optional<int64_t> n;
  if (auto err = int_field(body, "maxAttempts", 1, 1'000'000, n))
    return err;
  if (n)
    qc.max_attempts = static_cast<int32_t>(*n);
  n.reset();
  if (auto err = int_field(body, "initialBackoffMs", 0, 86'400'000, n))
    return err;
  if (n)
    qc.initial_backoff_ms = *n;
  n.reset();
  if (auto err = int_field(body, "maxBackoffMs", 0, 86'400'000, n))
    return err;
  if (n)
    qc.max_backoff_ms = *n;
  n.reset();
  if (auto err = int_field(body, "visibilityTimeoutMs", 1, 43'200'000, n))
    return err;
  if (n)
    qc.visibility_timeout_ms = *n;
  n.reset();
  if (auto err = int_field(body, "delayMs", 0, 43'200'000, n))
    return err;
  if (n)
    qc.delay_ms = *n;
  auto real = [&](const char* name, double lo, double hi,
                  double& out) -> caf::error {
    auto i = body.find(name);
    if (i == body.end() || i->is_null())
      return {};
    if (!i->is_number() || !(i->get<double>() >= lo && i->get<double>() <= hi))
      return bad(std::string{"\""} + name + "\" must be a number in ["
                 + json(lo).dump() + ", " + json(hi).dump() + "]");
    out = i->get<double>();
    return {};
  };
  if (auto err = real("backoffMultiplier", 1.0, 100.0, qc.backoff_multiplier))
    return err;
  if (auto err = real("jitter", 0.0, 1.0, qc.jitter))
    return err;
  std::optional<std::string> text;
  if (auto err = string_field(body, "ordering", text))
    return err;
  if (text) {
    if (*text != "none" && *text != "key")
      return bad("\"ordering\" must be none or key, not '" + *text + "'");
    qc.ordering = *text;
  }
  text.reset();
  if (auto err = string_field(body, "dlqTopic", text))
    return err;
  if (text)
    qc.dlq_topic = *text;
  // "earliest", "latest", an ISO 8601 date-time, or epoch ms (a number).
  if (auto i = body.find("start"); i != body.end() && !i->is_null()) {
    if (i->is_number_integer() && i->get<int64_t>() >= 0) {
      qc.start = i->get<int64_t>();
    } else if (i->is_string()) {
      auto start = parse_start_position(i->get<std::string>());
      if (!start)
        return bad("\"start\" must be earliest, latest, an ISO 8601 date-time "
                   "or epoch milliseconds, not '" + i->get<std::string>() + "'");
      qc.start = *start;
    } else {
      return bad("\"start\" must be earliest, latest, an ISO 8601 date-time "
                 "or epoch milliseconds");
    }
  }
  return qc;
}

json to_json(const queue_group_config& x) {
  return json{{"maxAttempts", x.max_attempts},
              {"initialBackoffMs", x.initial_backoff_ms},
              {"maxBackoffMs", x.max_backoff_ms},
              {"backoffMultiplier", x.backoff_multiplier},
              {"jitter", x.jitter},
              {"visibilityTimeoutMs", x.visibility_timeout_ms},
              {"ordering", x.ordering},
              {"dlqTopic", x.dlq_topic},
              {"start", start_position_text(x.start)},
              {"delayMs", x.delay_ms}};
}

json to_json(const queue_group_description& x) {
  json parts = json::array();
  for (auto& p : x.partitions)
    parts.push_back(json{{"topic", p.topic},
                         {"partition", p.partition.value},
                         {"committed", p.committed.value},
                         {"readEnd", p.read_end.value},
                         {"highWatermark", p.high_watermark.value},
                         {"available", p.available},
                         {"delayed", p.delayed},
                         {"scheduled", p.scheduled},
                         {"leased", p.leased},
                         {"deadLetterPending", p.dead_letter_pending},
                         {"done", p.done},
                         {"dlqTopic", p.dlq_topic},
                         {"deadLettered", p.dead_lettered}});
  return json{{"group", x.group},
              {"mode", "queue"},
              {"config", to_json(x.config)},
              {"partitions", std::move(parts)},
              {"waitingReceives", x.waiting_receives}};
}

json to_json(const group_description& x) {
  json members = json::array();
  for (auto& m : x.members) {
    json assigned = json::array();
    for (auto& tp : m.assignment)
      assigned.push_back(
        json{{"topic", tp.topic}, {"partition", tp.partition.value}});
    members.push_back(json{{"memberId", m.member_id},
                           {"groupInstanceId", m.group_instance_id},
                           {"clientId", m.client_id},
                           {"assignment", std::move(assigned)}});
  }
  json parts = json::array();
  int64_t total = 0;
  for (auto& p : x.partitions) {
    total += p.lag;
    parts.push_back(json{{"topic", p.topic},
                         {"partition", p.partition.value},
                         {"committedOffset", p.committed.value},
                         {"logStartOffset", p.log_start.value},
                         {"logEndOffset", p.log_end.value},
                         {"lag", p.lag},
                         {"memberId", p.member_id}});
  }
  return json{{"group", x.group},
              {"mode", x.mode},
              {"state", x.state},
              {"assignor", x.assignor},
              {"generation", x.generation},
              {"members", std::move(members)},
              {"partitions", std::move(parts)},
              {"totalLag", total}};
}

json to_json(const std::vector<partition_offset>& x) {
  json out = json::array();
  for (auto& po : x)
    out.push_back(json{{"topic", po.topic},
                       {"partition", po.partition.value},
                       {"offset", po.committed.value}});
  return out;
}

// -- DLQ operations -------------------------------------------------------------

json to_json(const dlq_info& x) {
  return json{{"topic", x.topic},
              {"groups", x.groups},
              {"sourceTopic", x.source_topic},
              {"partitions", x.partitions},
              {"depth", x.depth},
              {"redriven", x.redriven},
              {"total", x.total},
              {"oldestTimestamp", x.oldest_timestamp},
              {"ratePerSecond", x.rate_per_second}};
}

json to_json(const dlq_record& x, value_encoding enc) {
  record rec;
  rec.timestamp = x.message.timestamp;
  if (x.message.has_key)
    rec.key = x.message.key;
  if (x.message.has_value)
    rec.value = x.message.value;
  for (auto& h : x.message.headers)
    rec.headers.push_back(record_header{h.key, h.value});
  auto m = render_message(x.message.off, rec, enc);
  m["partition"] = x.message.partition.value;
  m["originalTopic"] = x.original_topic;
  m["originalPartition"] = x.original_partition;
  m["originalOffset"] = x.original_offset;
  m["attempts"] = x.attempts;
  m["error"] = x.error;
  m["group"] = x.group;
  m["firstFailureTimestamp"] = x.first_failure_ts;
  m["lastFailureTimestamp"] = x.last_failure_ts;
  m["redriveCount"] = x.redrive_count;
  m["redriven"] = x.redriven;
  return m;
}

json to_json(const dlq_show_response& x, value_encoding enc) {
  json records = json::array();
  for (auto& r : x.records)
    records.push_back(to_json(r, enc));
  return json{{"records", std::move(records)},
              {"scanned", x.scanned},
              {"nextOffsets", to_json(x.next_offsets)},
              {"endReached", x.end_reached}};
}

json to_json(const dlq_redrive_response& x) {
  json reports = json::array();
  for (auto& r : x.reports)
    reports.push_back(json{{"topic", r.topic},
                           {"partition", r.partition.value},
                           {"offset", r.off.value},
                           {"timestamp", r.timestamp}});
  return json{{"redriven", x.redriven},
              {"skipped", x.skipped},
              {"reports", std::move(reports)},
              {"nextOffsets", to_json(x.next_offsets)},
              {"endReached", x.end_reached}};
}

json to_json(const dlq_purge_response& x) {
  return json{{"purged", x.purged}, {"logStarts", to_json(x.log_starts)}};
}

caf::expected<dlq_redrive_request> parse_dlq_redrive(const json& body,
                                                     const std::string& topic) {
  if (!body.is_object())
    return bad("the body must be a JSON object {\"to\",\"partition\","
               "\"fromOffset\",\"toOffset\",\"offsets\",\"ratePerSecond\","
               "\"maxRecords\",\"all\"}");
  constexpr auto i32 = std::numeric_limits<int32_t>::max();
  constexpr auto i64 = std::numeric_limits<int64_t>::max();
  dlq_redrive_request req;
  req.topic = topic;
  std::optional<std::string> to;
  if (auto err = string_field(body, "to", to))
    return err;
  req.to_topic = to.value_or("");
  std::optional<int64_t> partition, from, upto, rate, max;
  if (auto err = int_field(body, "partition", 0, i32, partition))
    return err;
  if (auto err = int_field(body, "fromOffset", 0, i64, from))
    return err;
  if (auto err = int_field(body, "toOffset", 0, i64, upto))
    return err;
  if (auto err = int_field(body, "ratePerSecond", 0, i32, rate))
    return err;
  if (auto err = int_field(body, "maxRecords", 0, i32, max))
    return err;
  bool all = false;
  if (auto a = body.find("all"); a != body.end() && !a->is_null()) {
    if (!a->is_boolean())
      return bad("\"all\" must be true or false");
    all = a->get<bool>();
  }
  if (auto os = body.find("offsets"); os != body.end() && !os->is_null()) {
    if (!os->is_array())
      return bad("\"offsets\" must be an array of {\"partition\",\"offset\"}");
    for (auto& o : *os) {
      if (!o.is_object())
        return bad("\"offsets\" must be an array of {\"partition\",\"offset\"}");
      std::optional<int64_t> p, off;
      if (auto err = int_field(o, "partition", 0, i32, p, "offsets: "))
        return err;
      if (auto err = int_field(o, "offset", 0, i64, off, "offsets: "))
        return err;
      if (!off)
        return bad("offsets: \"offset\" is missing");
      req.offsets.push_back(partition_offset{
        topic, partition_id{static_cast<int32_t>(p.value_or(0))},
        offset{*off}, ""});
    }
  }
  bool range = from || upto;
  if (all && (range || !req.offsets.empty()))
    return bad("\"all\" excludes \"fromOffset\", \"toOffset\" and \"offsets\"");
  if (range && !req.offsets.empty())
    return bad("\"offsets\" excludes \"fromOffset\" and \"toOffset\"");
  if (!all && !range && req.offsets.empty())
    return bad("say which records: \"all\":true, \"fromOffset\"/\"toOffset\" "
               "or \"offsets\"");
  if (from && upto && *upto < *from)
    return bad("\"toOffset\" must not be below \"fromOffset\"");
  req.partition = partition ? static_cast<int32_t>(*partition) : -1;
  req.from_offset = from.value_or(0);
  req.to_offset = upto.value_or(-1);
  req.rate_per_second = static_cast<int32_t>(rate.value_or(0));
  req.max_records = static_cast<int32_t>(max.value_or(0));
  return req;
}

caf::expected<dlq_purge_request> parse_dlq_purge(const json& body,
                                                 const std::string& topic) {
  if (!body.is_object())
    return bad("the body must be a JSON object {\"beforeOffset\","
               "\"partition\"}");
  dlq_purge_request req;
  req.topic = topic;
  std::optional<int64_t> before, partition;
  if (auto err = int_field(body, "beforeOffset", 0,
                           std::numeric_limits<int64_t>::max(), before))
    return err;
  if (auto err = int_field(body, "partition", 0,
                           std::numeric_limits<int32_t>::max(), partition))
    return err;
  req.before_offset = before.value_or(-1);
  req.partition = partition ? static_cast<int32_t>(*partition) : -1;
  return req;
}

// -- users and ACLs -------------------------------------------------------------------

json to_json(const user_info& x) {
  return json{{"name", x.name},
              {"mechanism", x.mechanism},
              {"iterations", x.iterations}};
}

json to_json(const acl_entry& x) {
  return json{{"principal", x.principal},     {"resourceType", x.resource_type},
              {"resourceName", x.resource_name}, {"patternType", x.pattern_type},
              {"operation", x.operation},     {"permission", x.permission}};
}

caf::expected<user_spec> parse_user_spec(const json& body) {
  if (!body.is_object())
    return bad("the body must be a JSON object {\"name\",\"password\"}");
  user_spec out;
  std::optional<std::string> name, password;
  if (auto err = string_field(body, "name", name))
    return err;
  if (auto err = string_field(body, "password", password))
    return err;
  if (!name)
    return bad("\"name\" is missing");
  if (!password || password->empty())
    return bad("\"password\" is missing or empty");
  std::optional<int64_t> iterations;
  if (auto err = int_field(body, "iterations", 4096, 1 << 20, iterations))
    return err;
  out.name = std::move(*name);
  out.password = std::move(*password);
  if (iterations)
    out.iterations = static_cast<int32_t>(*iterations);
  return out;
}

caf::expected<acl_entry> parse_acl(const json& body) {
  if (!body.is_object())
    return bad("the body must be a JSON object {\"principal\",\"resourceType\","
               "\"resourceName\",\"patternType\",\"operation\",\"permission\"}");
  acl_entry x;
  x.pattern_type.clear();
  x.permission.clear();
  struct field {
    const char* key;
    std::string* out;
    bool required;
  };
  for (auto f : {field{"principal", &x.principal, true},
                 field{"resourceType", &x.resource_type, true},
                 field{"resourceName", &x.resource_name, false},
                 field{"patternType", &x.pattern_type, false},
                 field{"operation", &x.operation, true},
                 field{"permission", &x.permission, false}}) {
    std::optional<std::string> v;
    if (auto err = string_field(body, f.key, v))
      return err;
    if (!v && f.required)
      return bad(std::string{"\""} + f.key + "\" is missing");
    if (v)
      *f.out = std::move(*v);
  }
  return x;
}

} // namespace ferry::http_api
