# shardplan_embed_margin_stats(OUT_VAR JSON HEADER): a generated header HEADER (under the build folder) with the
# numbers of JSON (planner/report/margin_stats.json, written by tools/margin_stats.sh from `shardplan validate`)
# as constexpr values in namespace shardplan::margin_stats; cmake/embed_margin_stats.cmake writes it at build
# time, again whenever the JSON changes. Its path is returned in OUT_VAR for the library's source list.
function(shardplan_embed_margin_stats out_var json header)
  add_custom_command(OUTPUT ${header}
    COMMAND ${CMAKE_COMMAND} -DJSON=${json} -DOUT=${header} -P ${SHARDPLAN_SOURCE_DIR}/cmake/embed_margin_stats.cmake
    DEPENDS ${json} ${SHARDPLAN_SOURCE_DIR}/cmake/embed_margin_stats.cmake VERBATIM)
  set(${out_var} ${header} PARENT_SCOPE)
endfunction()
