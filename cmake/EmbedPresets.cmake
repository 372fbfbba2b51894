# shardplan_embed_presets(OUT_VAR FUNC DIR NAME...): a generated C++ source defining
# `shardplan_generated::FUNC()` with DIR/NAME.json of every NAME embedded (cmake/embed_presets.cmake writes it);
# its path is returned in OUT_VAR for the library's source list. Used for the model and the cluster presets.
function(shardplan_embed_presets out_var func dir)
  list(TRANSFORM ARGN PREPEND ${dir}/ OUTPUT_VARIABLE files)
  list(TRANSFORM files APPEND .json)
  set(gen ${CMAKE_CURRENT_BINARY_DIR}/${func}.cpp)
  add_custom_command(OUTPUT ${gen}
    COMMAND ${CMAKE_COMMAND} -DOUT=${gen} -DNAMESPACE=shardplan_generated -DFUNC=${func}
            "-DFILES=${files}" -P ${SHARDPLAN_SOURCE_DIR}/cmake/embed_presets.cmake
    DEPENDS ${files} ${SHARDPLAN_SOURCE_DIR}/cmake/embed_presets.cmake VERBATIM)
  set(${out_var} ${gen} PARENT_SCOPE)
endfunction()
