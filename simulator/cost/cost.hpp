// The cost room's interface: the compute constants with their sources (constants.hpp), the CostModel that
// prices GEMMs, attention, memory-bound work and collectives (cost_model.hpp), and the materialised attention
// core's tensors and passes (attention_core.hpp). Other rooms include this header only.
#pragma once
#include "simulator/cost/attention_core.hpp"
#include "simulator/cost/constants.hpp"
#include "simulator/cost/cost_model.hpp"
