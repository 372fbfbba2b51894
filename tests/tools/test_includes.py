"""tools/ci/includes.py finds includes against the rooms' direction: it passes on the tree as it is and flags a
lower room including a higher one, an internal header of another room, and a top-level folder including one
above it."""
import importlib.util
import os
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
spec = importlib.util.spec_from_file_location("includes", os.path.join(ROOT, "tools", "ci", "includes.py"))
includes = importlib.util.module_from_spec(spec)
spec.loader.exec_module(includes)


class IncludesTest(unittest.TestCase):
    def setUp(self):
        self.table = includes.rooms()
        self.tmp = []

    def tearDown(self):
        for p in self.tmp:
            os.remove(os.path.join(ROOT, p))

    def write(self, rel, text):
        with open(os.path.join(ROOT, rel), "w") as f:
            f.write(text)
        self.tmp.append(rel)
        return rel

    def test_table_has_every_room_folder(self):
        folders = {d for d in os.listdir(os.path.join(ROOT, "simulator"))
                   if os.path.isdir(os.path.join(ROOT, "simulator", d))}
        self.assertEqual(folders, set(self.table))
        self.assertEqual(self.table["engine"], (0, "engine/engine.hpp"))
        self.assertLess(self.table["plan"][0], self.table["lowering"][0])

    def test_violations_are_found(self):
        up = self.write("simulator/model/_probe_up.cpp", '#include "simulator/lowering/lowering.hpp"\n')
        internal = self.write("simulator/simulate/_probe_internal.cpp",
                              '#include "simulator/lowering/lowering_state.hpp"\n')
        same_rank = self.write("simulator/memory/_probe_same.cpp", '#include "simulator/parallel/parallel.hpp"\n')
        top = self.write("core/_probe_top.cpp", '#include "planner/search.hpp"\n')
        ok = self.write("simulator/lowering/_probe_ok.cpp",
                        '#include "simulator/memory/memory.hpp"\n#include "simulator/lowering/units.hpp"\n')
        errors = includes.check([up, internal, same_rank, top, ok], self.table)
        self.assertEqual(len(errors), 4, errors)
        self.assertTrue(any("_probe_up.cpp:1: simulator/model/ (rank 1) may not include" in e for e in errors))
        self.assertTrue(any("lowering_state.hpp is internal to simulator/lowering/" in e for e in errors))
        self.assertTrue(any("_probe_same.cpp:1: simulator/memory/ (rank 4)" in e for e in errors))
        self.assertTrue(any("core/ may not include planner/search.hpp" in e for e in errors))

    def test_tree_passes(self):
        self.assertEqual(includes.main(), 0)


if __name__ == "__main__":
    unittest.main()
