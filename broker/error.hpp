#pragma once
// Ferry's error codes. Every failure that reaches a user carries one of these
// plus a context message saying what exactly was wrong.

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include <cstdint>
#include <string>

namespace ferry {

/// Error codes in the `ferry` category. Values are stable: they travel in
/// messages between nodes and show up in logs and HTTP bodies.
enum class ec : uint8_t {
  /// Not an error.
  none = 0,

  // -- record batch codec --------------------------------------------------
  /// The batch is shorter than its header or its length field claims.
  truncated_batch = 1,
  /// The CRC-32C stored in the batch does not match its contents.
  crc_mismatch,
  /// The magic byte is not 2 (only RecordBatch v2 is supported).
  bad_magic,
  /// A varint is longer than 10 bytes (or 5 for 32-bit) or runs off the end.
  bad_varint,
  /// A length field is negative (where not allowed), or points past the end
  /// of its enclosing buffer, or exceeds a configured maximum.
  length_overflow,
  /// A record's fields are inconsistent (count mismatch, trailing bytes...).
  malformed_record,
  /// The attribute bits name a compression codec Ferry cannot handle.
  unsupported_compression,
  /// The compressed records section could not be decompressed.
  decompression_failed,

  // -- storage ------------------------------------------------------------
  /// A read, write, sync, rename or delete failed (errno in the context).
  io_error = 20,
  /// The device is full (ENOSPC/EDQUOT); the append was refused, the log is
  /// unchanged.
  disk_full,
  /// The requested offset is below the log start or above the log end.
  offset_out_of_range,
  /// A segment or index file is damaged beyond automatic repair.
  corrupt_segment,
  /// The log or store was closed, or failed earlier and is fenced.
  log_closed,
  /// An argument is outside its documented domain.
  invalid_argument,
  /// An LMDB call failed (mdb_strerror in the context).
  lmdb_error,
  /// A key was not found in a store.
  not_found,
  /// A stored or replicated record names a kind (format version) this build
  /// does not know: written by a newer Ferry. Nothing of it is applied.
  unknown_record_kind,

  // -- broker requests ----------------------------------------------------
  /// The topic does not exist.
  unknown_topic = 40,
  /// The partition does not exist in the topic.
  unknown_partition,
  /// A topic with that name exists already.
  topic_exists,
  /// The topic name does not match [a-zA-Z0-9._-]{1,249}.
  invalid_topic_name,
  /// A record or batch is larger than max.message.bytes.
  message_too_large,
  /// A topic or client setting is unknown or has an invalid value.
  invalid_config,
  /// The request asks for something this cluster cannot do yet or at all.
  policy_violation,
  /// The request is malformed.
  invalid_request,
  /// This replica is not the partition's leader (retriable).
  not_leader,
  /// The broker is over its memory budget: retry later (retriable).
  throttled,
  /// The request timed out (retriable).
  request_timed_out,
  /// Fewer in-sync replicas than min.insync.replicas (retriable).
  not_enough_replicas,
  /// A replica's leader epoch differs from the request's: the sender's
  /// metadata is stale or the replica is (retriable after a refresh).
  fenced_leader_epoch,

  // -- idempotent producers -----------------------------------------------
  /// The batch's sequence number leaves a gap after the last one seen.
  out_of_order_sequence = 60,
  /// The producer epoch is older than the current one for this producer id.
  invalid_producer_epoch,
  /// The producer id is unknown to this partition.
  unknown_producer_id,

  // -- consumer groups ----------------------------------------------------
  /// The member id is unknown to the coordinator (rejoin).
  unknown_member = 80,
  /// The generation id is stale: the member was fenced by a rebalance.
  illegal_generation,
  /// A rebalance is under way: rejoin.
  rebalance_in_progress,
  /// The operation needs an empty group.
  group_not_empty,
  /// The group does not exist.
  unknown_group,
  /// The coordinator for the group is not available (retriable).
  coordinator_not_available,
  /// A static member's instance id is in use by another member id.
  fenced_instance_id,
  /// Queue mode: no live lease on that record matches the request (offset
  /// unknown or already committed, record not leased, or already done).
  lease_not_found,
  /// Queue mode: the lease ran out before the request; the record was (or
  /// will be) redelivered, or dead-lettered.
  lease_expired,
  /// Queue mode: the record is leased to another member.
  not_lease_owner,
  /// A join names no assignor (protocol) every member supports, or a
  /// protocol type other than the group's (Kafka's INCONSISTENT_GROUP_PROTOCOL).
  inconsistent_group_protocol,

  // -- security (issue 16) --------------------------------------------------
  /// No credentials, an unknown user or a wrong password (which of them is
  /// never told to the caller).
  authentication_failed = 100,
  /// The principal may not do this (no ACL allows it, or one denies it).
  authorization_failed,
  /// Too many failed logins from this source: wait, then try again.
  login_throttled,
  /// The user does not exist (user delete).
  unknown_user,
  /// The node has not loaded the users and ACLs from the metadata quorum
  /// yet (it is starting): try again in a moment (retriable).
  security_loading,
};

/// The CAF error category of `ec`.
caf::atom_value ferry_category();

/// The enum's name, e.g. "crc_mismatch".
const char* to_string(ec x);

/// Lets `caf::error err = ec::crc_mismatch;` work.
caf::error make_error(ec x);

/// An error with a context message, e.g. "stored 0x1234 computed 0x5678".
caf::error make_error(ec x, std::string context);

/// True if `err` is of category ferry and has code `x`.
bool is(const caf::error& err, ec x);

/// The code of a ferry error, or ec::none for an error of another category.
ec code_of(const caf::error& err);

/// "crc_mismatch: stored 0x1234 computed 0x5678", for logs and CLIs.
std::string describe(const caf::error& err);

} // namespace ferry
