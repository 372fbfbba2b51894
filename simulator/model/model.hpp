// The model room's interface: ModelSpec (a transformer's dimensions, from presets, Hugging Face config.json
// or the spec JSON), ModelGraph (a Boost.Graph of layers with their parameter tensors, GEMMs and saved bytes)
// and the embedded model presets. Other rooms include this header only.
#pragma once
#include "simulator/model/lora.hpp"
#include "simulator/model/model_graph.hpp"
#include "simulator/model/model_spec.hpp"
#include "simulator/model/presets.hpp"
