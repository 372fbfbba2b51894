// The optimizer's state tensor by tensor (optimizer_state.hpp; docs/model.md "Optimizers").
#include "simulator/memory/optimizer_state.hpp"

#include "core/checked.hpp"
#include "simulator/memory/accounting.hpp"
#include "simulator/memory/layer_memory.hpp"

namespace shardplan {

namespace {
/// bitsandbytes' and torchao's block of the 8-bit states: blocksize = 256 in Optimizer2State.init_state
/// (bitsandbytes 0.50.2 bitsandbytes/optim/optimizer.py), block_size=256 in torchao 0.18 AdamW8bit.
constexpr std::int64_t kBlock8bit = 256;
/// The smallest tensor either keeps in 8 bits: min_8bit_size=4096 (bitsandbytes), `numel() >= 4096`
/// (torchao _AdamBase._new_buffer).
constexpr std::int64_t kMin8bitElems = 4096;
/// torchao's quantile map: a 256-entry fp32 tensor per 8-bit state tensor (OptimState8bit.zeros: qmap =
/// torch.tensor(get_qmap_signed() / get_qmap_unsigned())).
constexpr Bytes kTorchaoQmapBytes = 256 * 4;
}  // namespace

Bytes StateTensors::sum() const {
  Bytes s = 0;
  for (int i = 0; i < n; ++i) s = add_checked(s, bytes[static_cast<std::size_t>(i)]);
  return s;
}

Bytes StateTensors::allocated() const {
  Bytes s = 0;
  for (int i = 0; i < n; ++i) s = add_checked(s, allocation_bytes(bytes[static_cast<std::size_t>(i)]));
  return s;
}

int moment_bytes(const RuntimeTraits& rt, const Plan& p) {
  return !rt.master_weights_in_optimizer && p.precision == Precision::kBf16True ? 2 : 4;
}

int master_bytes(const RuntimeTraits& rt) {
  // DeepSpeed bf16-mixed (bf16_optimizer / ZeRO: fp32 partitions of the bf16 parameters) and Megatron's
  // distributed optimizer (shard_main_param = shard_model_param.clone().float()).
  return rt.master_weights_in_optimizer ? 4 : 0;
}

StateTensors optimizer_state_tensors(const RuntimeTraits& rt, const Plan& p, const OptimizerTensor& t) {
  StateTensors s;
  const Bytes n = t.elems, sb = moment_bytes(rt, p);
  Optimizer o = p.optimizer;
  if (o == Optimizer::kMuon && !t.matrix) o = Optimizer::kAdamW;  // Muon's auxiliary AdamW
  switch (o) {
    case Optimizer::kAdamW:
    case Optimizer::kAdam:
      s.add(mul_checked(n, sb, "optimizer bytes"));
      s.add(mul_checked(n, sb, "optimizer bytes"));
      break;
    case Optimizer::kSgd:
    case Optimizer::kLion:
    case Optimizer::kMuon:
      s.add(mul_checked(n, sb, "optimizer bytes"));
      break;
    case Optimizer::kAdafactor:
      if (t.cols > 1 && !t.flat) {
        // row_var [..., rows, 1], col_var [..., 1, cols] (a grouped expert weight: one per leading index)
        s.add(mul_checked(mul_checked(t.stack, t.rows, "optimizer elements"), sb, "optimizer bytes"));
        s.add(mul_checked(mul_checked(t.stack, t.cols, "optimizer elements"), sb, "optimizer bytes"));
      } else {
        s.add(mul_checked(n, sb, "optimizer bytes"));  // variance
      }
      break;
    case Optimizer::kAdamW8bit:
      if (rt.adamw8bit_torchao) {  // torchao AdamW8bit
        if (n >= kMin8bitElems && n % kBlock8bit == 0) {
          for (int moment = 0; moment < 2; ++moment) {
            s.add(n);                   // codes, uint8
            s.add(n / kBlock8bit * 4);  // scale, fp32 per block
            s.add(kTorchaoQmapBytes);   // qmap
          }
        } else {
          s.add(mul_checked(n, sb, "optimizer bytes"));
          s.add(mul_checked(n, sb, "optimizer bytes"));
        }
      } else if (n >= kMin8bitElems) {  // bitsandbytes AdamW8bit
        const Bytes blocks = ceil_div(n, kBlock8bit);
        s.add(n);           // state1, uint8
        s.add(n);           // state2, uint8
        s.add(blocks * 4);  // absmax1, fp32
        s.add(blocks * 4);  // absmax2, fp32
      } else {
        s.add(mul_checked(n, 4, "optimizer bytes"));
        s.add(mul_checked(n, 4, "optimizer bytes"));
      }
      break;
  }
  return s;
}

void for_each_optimizer_tensor(const ModelGraph& model, const Plan& p,
                               const std::function<void(const OptimizerTensor&, std::int64_t)>& f) {
  const RuntimeTraits rt = runtime_traits(p);
  if (rt.padding == Padding::kFlatUnit || rt.optimizer_flat_partitions) {
    // One flat partition (FSDP1 one FlatParameter shard per unit; taken as one, as state_elems does).
    const std::int64_t n = state_elems(model, p).optimizer;
    OptimizerTensor t;
    t.elems = t.rows = t.full_rows = n;
    t.flat = true;
    f(t, 1);
    return;
  }
  for (const Layer* l : model.order()) {
    l->for_each_tensor_group([&](const Tensor& ten, std::int64_t count) {
      if (ten.frozen) return;  // LoRA's base: no optimizer state (docs/model.md "LoRA and QLoRA")
      const bool expert = p.ep > 1 && ten.expert;
      const std::int64_t rows = tp_local_rows(ten, p.tp), cols = tp_local_cols(ten, p.tp);
      // A grouped expert weight [stack, rows, cols] holds the rank's stack / ep experts under EP.
      const std::int64_t e = expert && ten.stack > 1 ? ten.stack / p.ep : ten.stack;
      const int g = expert ? p.efsdp_ranks() : p.fsdp_ranks();
      OptimizerTensor t;
      t.full_rows = rows;
      t.full_cols = cols;
      t.cols = cols;
      t.rows = rows;
      t.stack = e;
      if (p.zero >= 1) {
        // FSDP2's Shard(0) of dim 0; a grouped weight shards its experts unless the ranks exceed them, then
        // each expert's rows (Shard(1)), as tensor_shard_elems (layer_memory.cpp).
        if (e == 1 || g > e)
          t.rows = ceil_div(rows, g);
        else
          t.stack = ceil_div(e, g);
      }
      t.elems = mul_checked(mul_checked(t.stack, t.rows, "optimizer elements"), cols, "optimizer elements");
      t.matrix = l->block >= 0 && ten.dim1 > 1 && ten.stack == 1;
      // A rank holds 1/ep of the routed experts' per-expert tensors.
      f(t, expert && ten.stack == 1 ? count / p.ep : count);
    });
  }
}

Bytes optimizer_state_bytes(const ModelGraph& model, const Plan& p, bool rounded) {
  Bytes total = 0;
  const RuntimeTraits rt = runtime_traits(p);
  for_each_optimizer_tensor(model, p, [&](const OptimizerTensor& t, std::int64_t count) {
    const StateTensors s = optimizer_state_tensors(rt, p, t);
    if (t.flat) {
      total =
          add_checked(total, add_checked(s.sum(), mul_checked(t.elems, master_bytes(rt), "master bytes")));
      return;
    }
    total = add_checked(total, mul_checked(rounded ? s.allocated() : s.sum(), count, "optimizer bytes"));
  });
  return total;
}

OptimizerWork optimizer_work(const ModelGraph& model, const Plan& p) {
  OptimizerWork w;
  for_each_optimizer_tensor(model, p, [&](const OptimizerTensor& t, std::int64_t count) {
    const std::int64_t e = mul_checked(t.elems, count, "optimizer elements");
    w.elems = add_checked(w.elems, e);
    if (p.optimizer == Optimizer::kMuon && t.matrix) w.matrix_elems = add_checked(w.matrix_elems, e);
    w.tensors = add_checked(w.tensors, count);
  });
  return w;
}

}  // namespace shardplan
