// Lowering, the chunked loss's effects outside its tensor list (docs/model.md "Chunked loss"): torchtitan
// 0.3.0 components/loss.py ChunkedLossWrapper over FSDP2 (torch 2.15), checked on the reference lane's whole
// step (tools/reference/run.py --loss-impl chunked, tests/reference/test_chunked_loss.py).
#include "simulator/lowering/lowering_state.hpp"

namespace shardplan::detail {

void Lowering::loss_handoffs(int op) {
  for (std::size_t i = 0; i < loss_list_.size(); ++i) {
    const LossTensor& t = *loss_list_[i];
    if (t.made != op || loss_ids_[i] < 0) continue;
    if (t.freed == kLossToGrads) {
      // The last chunk's reduce-scatter output is lm_head's sharded gradient (foreach_reduce views it,
      // _fsdp_collectives.py _cast_and_view_sharded_grads): it lives to zero_grad as the other units' shards
      // (lowering_comm.cpp reduce_scatter); a later micro-batch's is added into the existing shard.
      if (!rt_.grads_persistent && loss_mb_ == 0) {
        grad_groups_.push_back(loss_ids_[i]);
        grads_allocated_ += loss_bytes(t);
      } else {
        free_group(MemCategory::kGrads, loss_ids_[i]);
      }
    } else if (t.freed == kLossHeldRs) {
      // Its input stays in comm_ctx.reduce_scatter_states until the next post-backward (the head unit's, in
      // the decoder's backward) waits on it and drops it (_fsdp_param_group.py post_backward rs_wait).
      if (rt_.rs_input_held) {
        if (held_rs_id_ >= 0) free_group(MemCategory::kCommBuffers, held_rs_id_);
        held_rs_id_ = loss_ids_[i];
      } else {
        free_group(MemCategory::kCommBuffers, loss_ids_[i]);
      }
    } else {
      continue;
    }
    loss_ids_[i] = -1;
  }
}

void Lowering::chunked_loss_after_call(int u, int mb) {
  if (p_.loss() != LossImpl::kChunked) return;
  // The last chunk's reduce-scatter of lm_head's gradient (its buffers are in the loss layer's list): the
  // group's reduce-scatter, in the reduce dtype, on the shard lane after the loss call's compute.
  const SimUnit& un = unit(u);
  const double bytes = static_cast<double>(un.gathered_elems - un.reduced_gathered_elems) * br_;
  if (rt_.reduce_scatter && un.loss_reduced_elems > 0 && bytes > 0) {
    prev_prev_rs_ = prev_rs_;
    prev_rs_ = last_shard_comm_ = add_collective(
        CollectiveKind::kReduceScatter, CommKind::kReduceScatter, kLaneShard, bytes, shard_g_, last_compute_,
        busbw_factor(CollectiveKind::kReduceScatter, p_.fsdp_ranks()) * bytes,
        [&] { return "reduce_scatter lm_head (chunked loss)" + mb_suffix(mb); }, u, mb);
  }
  // loss.py:770-772: after the chunk loop `lm_head.set_reshard_after_forward(True)`, ..., `lm_head.reshard()`
  // frees the [norm, lm_head] group's unsharded parameters; the decoder's backward reaches the final norm
  // and the group's pre-backward (registered on the root's output by _fsdp_state.py
  // _force_complete_incomplete_states, the norm having run without lm_head) gathers it again and prefetches
  // the last block; its one post-backward reduces the norm's gradient. Logged on a real one-rank FSDP2 run
  // (unshard, pre_backward, post_backward calls) and seen in the lane's trace: one all-gather of the group at
  // the head's backward, then the last block's.
  if (rt_.gathers_params) free_unsharded(u);
}

}  // namespace shardplan::detail
