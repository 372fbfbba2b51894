# shardplan_embed_margin_stats(OUT_VAR JSON): a generated C++ source defining planner/report/margin.hpp's
# measured error statistics (kReservedMemoryError, kThroughputError, kThroughputTieTolerance, kDefaultHeadroom,
# margin_stats::*) from JSON (planner/report/margin_stats.json, written by tools/margin_stats.sh from `shardplan
# validate`); cmake/embed_margin_stats.cmake writes it at build time, again whenever the JSON changes. A source,
# not a header: only this file recompiles when the numbers move, and no other compile command depends on the
# build folder's path (ccache shares build/ and build-python/). Its path is returned in OUT_VAR for the
# library's source list.
function(shardplan_embed_margin_stats out_var json)
  set(gen ${CMAKE_CURRENT_BINARY_DIR}/margin_stats.cpp)
  add_custom_command(OUTPUT ${gen}
    COMMAND ${CMAKE_COMMAND} -DJSON=${json} -DOUT=${gen} -P ${SHARDPLAN_SOURCE_DIR}/cmake/embed_margin_stats.cmake
    DEPENDS ${json} ${SHARDPLAN_SOURCE_DIR}/cmake/embed_margin_stats.cmake VERBATIM)
  set(${out_var} ${gen} PARENT_SCOPE)
endfunction()
