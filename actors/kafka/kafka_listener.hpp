#pragma once
// kafka_listener: a node's Kafka wire-protocol port (ferryd --kafka-port).
// Kafka clients (librdkafka and kcat, kafka-python, the Java client) produce
// to and fetch from the same topics that the CAF clients, HTTP, ferryctl and
// the console use: Ferry stores Kafka's RecordBatch v2, so produced batches
// are appended as they come and fetched batches go out as they are stored.
//
// APIs and versions: broker/kafka_protocol.hpp `supported_apis()` (today
// ApiVersions 0-3, Metadata 0-8, Produce 3-8, Fetch 4-11, ListOffsets 1-5,
// OffsetForLeaderEpoch 0-3, InitProducerId 0-1, SaslHandshake 0-1,
// SaslAuthenticate 0-1; the admin APIs (kafka_admin.cpp); and the group APIs FindCoordinator 0-2, JoinGroup
// 0-5, SyncGroup 0-3, Heartbeat 0-3, LeaveGroup 0-3, OffsetCommit 0-7,
// OffsetFetch 0-5, ListGroups 0-2, DescribeGroups 0-4, served in
// kafka_groups.cpp on the same groups as every other client).
// A request of another key or version is answered with UNSUPPORTED_VERSION
// (ApiVersions with its v0 answer listing what Ferry speaks), and the
// connection stays open. Transactions are not served (see
// actors/kafka/README.md).
//
// Security (config tls, security): TLS on the port; with users set, each
// connection logs in with SaslHandshake/SaslAuthenticate (PLAIN or
// SCRAM-SHA-256, kafka_sasl.cpp) before anything but ApiVersions, and every
// request is checked against the ACLs where it enters (may() in
// kafka_internal.hpp; the table is in actors/kafka/README.md).
//
// How a request is served: each frame is decoded on an io thread; what needs
// the broker is asked of the node's front door (the broker_actor, in this
// process) by a throw-away CAF actor, as the HTTP gateway does, so a long
// poll costs a parked fetch and no thread. Answers go out in request order
// per connection, as Kafka requires (a client pipelines requests and matches
// answers by order and correlation id). Produce with acks=0 gets no answer.
//
//   Metadata   topics (all, or those named; an unknown one gets
//              UNKNOWN_TOPIC_OR_PARTITION: topics are never created by a
//              metadata or produce request), every node with a Kafka
//              listener as a broker (node id, advertised host, Kafka port),
//              leaders, leader epochs, replicas and ISR from the metadata
//              quorum, the controller.
//   Produce    one ferry::produce_request per partition, all sent to the
//              front door in one multi-partition request (it forwards
//              partitions led elsewhere); acks 0/1/-1 map to Ferry's acks.
//   Fetch      every partition is read at once; if that gives fewer than
//              min_bytes and max_wait_ms > 0, every partition is long-polled
//              and the answer goes out when the first brings data (or the
//              wait ends). Partitions beyond the request's max_bytes are
//              answered empty (the first non-empty one is always whole).
//   ListOffsets earliest (-2), latest (-1, the high watermark) or the first
//              offset at or after a timestamp (-1 if no record is that
//              late, as Kafka answers).
//   OffsetForLeaderEpoch  where an epoch ends on the partition's leader
//              (front door: offsets_atom, epoch_end_request), so a consumer
//              can check its position after a leader change.
//
// Bad input: a frame size below 8 or above max_request_bytes closes the
// connection (logged, at most every 10 s); a request whose body does not
// decode (a length past the frame's end, bytes left over, a negative count)
// is answered with INVALID_REQUEST where the API has a place for an error,
// else the connection closes, as Kafka does; the log names the field.
//
// Threads and lifetime as the HTTP gateway: listen() binds, serve() starts
// the threads, stop() closes everything and joins them; construct and stop
// from one thread, stop before the actor system ends.

#include "actors/protocol/interfaces.hpp"

#include "broker/tls_server.hpp"

#include <caf/expected.hpp>
#include <caf/fwd.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace ferry {

class security_registry;
class audit_log;

struct kafka_listener_config {
  /// Address and port to listen on; port 0 picks a free one.
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  /// Threads running the io_context.
  int threads = 1;
  /// Largest request frame (Kafka's socket.request.max.bytes); a larger
  /// size closes the connection. Ferry's records are capped at 1 MiB, and a
  /// produce request carries one batch per partition.
  size_t max_request_bytes = 64u << 20;
  /// Requests one connection may have in flight before reading pauses.
  size_t max_in_flight = 64;
  /// Timeout of every broker request except long-poll fetches (which get
  /// max_wait_ms plus long_poll_margin).
  std::chrono::milliseconds request_timeout{30000};
  std::chrono::milliseconds max_wait{60000};
  std::chrono::milliseconds long_poll_margin{10000};
  /// What FindCoordinator answers: this node (its id, the host clients
  /// reach it at, empty = `host`, and the bound port). The node relays a
  /// group's requests to the node that coordinates it, so any node will do.
  int32_t node_id = 0;
  std::string advertised_host;
  /// TLS on this port (off when tls.certificate is empty): Kafka's SSL and
  /// SASL_SSL listeners. A client certificate is required or only checked
  /// when sent, as tls.require_client_certificate says.
  tls_server_config tls;
  /// With users and ACLs set (ferryd --auth scram), every connection logs in
  /// with SASL first (PLAIN or SCRAM-SHA-256) and each request is checked
  /// against the ACLs; null: every request is served as before.
  std::shared_ptr<const security_registry> security;
  /// Denied requests and failed logins; null: not written.
  std::shared_ptr<audit_log> audit;
  /// As the HTTP gateway: failed logins one address may make before each
  /// further attempt waits lockout_base, doubling up to lockout_max.
  int login_failures_allowed = 5;
  std::chrono::milliseconds login_lockout_base{1000};
  std::chrono::milliseconds login_lockout_max{30000};
};

/// The Kafka port of one node. Not copyable.
class kafka_listener {
public:
  /// Binds and listens (connections wait in the backlog until serve()).
  /// Errors: ec::io_error naming the address.
  static caf::expected<std::unique_ptr<kafka_listener>>
  listen(kafka_listener_config cfg);

  ~kafka_listener();

  kafka_listener(const kafka_listener&) = delete;
  kafka_listener& operator=(const kafka_listener&) = delete;

  /// Starts the threads and accepting. `sys` must outlive stop(); `broker`
  /// is the node's front door. Call once.
  void serve(caf::actor_system& sys, broker_actor broker);

  /// The port actually bound (useful with port 0).
  uint16_t port() const;

  /// Loads the TLS files again (SIGHUP): connections accepted afterwards
  /// use them, open ones keep theirs. invalid_config naming a file that
  /// does not load (the old context stays), or when TLS is off.
  caf::error reload_tls();

  /// Stops accepting, closes every connection, joins the threads.
  /// Idempotent.
  void stop();

private:
  struct impl;
  explicit kafka_listener(std::shared_ptr<impl> p);
  std::shared_ptr<impl> impl_;
};

} // namespace ferry
