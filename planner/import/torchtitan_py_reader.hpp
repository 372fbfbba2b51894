// Following the config function of a torchtitan 0.3.0 Python module (--from FILE.py[:FUNCTION]) into the
// "section.key" fields it sets; planner/import/torchtitan_py.cpp maps the fields to plan knobs.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "planner/py_config.hpp"

namespace shardplan::import {

/// Reads the config function of a torchtitan 0.3.0 module by following its statements in order: calls of
/// the config dataclasses (TrainingConfig(...), Trainer.Config(...), ...) set their section with the
/// dataclass defaults filled in, attribute assignments (config.training.seq_len = ...) set one field, and
/// calls of other functions of the same file are followed. Fields end up as "section.key" -> text.
class TitanReader {
 public:
  TitanReader(const py::Module& m, const std::string& path) : m_(m), path_(path) {}

  std::map<std::string, std::string> fields;
  std::map<std::string, int> lines;        ///< the line each field was set on (the file's own settings)
  std::vector<std::string> others;         ///< Trainer.Config arguments the reader does not know
  std::vector<std::string> notes;          ///< unmodelled / unread, for stderr
  std::string model_module, model_flavor;  ///< model_registry's module and flavor

  void run_function(const std::string& name, int depth = 0);

 private:
  const py::Module& m_;
  const std::string& path_;
  std::map<std::string, py::Value> vars_;

  const py::Function* find(const std::string& name) const;
  py::Value resolve(const py::Value& v) const;
  /// "SelectiveAC.Config" -> "SelectiveAC.Config"; "torchtitan.config.TrainingConfig" -> "TrainingConfig".
  static std::string last(const std::string& dotted);
  void set(const std::string& field, const py::Value& raw);
  void defaults(const std::string& section);
  /// A call that builds (part of) the config, as the value of `field` ("" = the whole Trainer.Config).
  void apply(const py::Value& raw, const std::string& field, int depth);
};

}  // namespace shardplan::import
