#pragma once
// The answers of a multi-partition produce, gathered without an answer
// message per partition (issue 15).
//
// A producer's request carries batches for many partitions of one node. The
// node sends each local batch to its replica as (produce_atom,
// produce_request, produce_slot): not a request, so the replica does not
// answer with a message; it writes its answer into slot `index` of the
// shared gather and lets go of it. The node writes the slots of batches it
// could not route or forwarded to another node. Whoever lets go of the
// gather last (a replica, the node, or the destruction of a message nobody
// handled) sends the node one (produce_atom, produce_gathered) message, and
// the node answers the client from its own thread.
//
// Each slot is written by exactly one party, before it lets go of its
// reference; the reference count's release and acquire order those writes
// before the final read. A slot nobody wrote keeps the error the node put
// there first (the replica stopped before answering).
#include "actors/protocol/interfaces.hpp"

#include <caf/send.hpp>
#include <caf/typed_response_promise.hpp>

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace ferry {

struct produce_answers {
  /// The client's request, answered by the node.
  caf::typed_response_promise<std::vector<produce_result>> rp;
  /// One per batch of the request, in its order.
  std::vector<produce_result> out;
  /// Which slots a local replica answered (the node counts their errors in
  /// its metrics when it answers; it counted the others as they happened).
  std::vector<uint8_t> from_replica;
};

struct produce_gather {
  produce_gather(broker_actor node_handle,
                 caf::typed_response_promise<std::vector<produce_result>> rp,
                 size_t n)
    : node(std::move(node_handle)), answers(std::make_shared<produce_answers>()) {
    answers->rp = std::move(rp);
    answers->out.resize(n);
    answers->from_replica.resize(n, 0);
  }

  produce_gather(const produce_gather&) = delete;
  produce_gather& operator=(const produce_gather&) = delete;

  ~produce_gather() {
    if (node && answers)
      caf::anon_send(node, produce_atom_v, produce_gathered{std::move(answers)});
  }

  broker_actor node;
  std::shared_ptr<produce_answers> answers;
};

/// Where a replica's answer to one produce goes: the promise of a request,
/// or a slot of a multi-partition produce's gather.
class produce_answer {
public:
  produce_answer() = default;

  explicit produce_answer(caf::typed_response_promise<produce_response> rp)
    : promise_(std::move(rp)) {
  }

  explicit produce_answer(produce_slot slot) : slot_(std::move(slot)) {
  }

  /// Not answered yet (false for acks=0, answered at once).
  bool pending() const {
    return slot_.gather != nullptr || promise_.pending();
  }

  void deliver(produce_response x) {
    if (slot_.gather) {
      auto& r = slot_.gather->answers->out[slot_.index];
      r.response = std::move(x);
      r.error = caf::error{};
      slot_.gather.reset();
    } else if (promise_.pending()) {
      promise_.deliver(std::move(x));
    }
  }

  void deliver(caf::error err) {
    if (slot_.gather) {
      slot_.gather->answers->out[slot_.index].error = std::move(err);
      slot_.gather.reset();
    } else if (promise_.pending()) {
      promise_.deliver(std::move(err));
    }
  }

private:
  caf::typed_response_promise<produce_response> promise_;
  produce_slot slot_;
};

} // namespace ferry
