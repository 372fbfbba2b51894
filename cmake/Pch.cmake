# Precompiled headers: the third-party headers most translation units parse (nlohmann/json in 114 of the CLI's
# 143, Boost.Graph in 90, fmt, CLI11 in the CLI's 9 at about 3 s each) are parsed once per target instead of once
# per file. Measured on the 2-core development machine (docs/performance.md "Build"): they were about two thirds of
# the CLI's compile time from an empty cache, which README line 1 pays on a fresh machine.
# ccache caches files compiled with a precompiled header when its sloppiness allows the header's defines and time
# macros (CMakeLists.txt sets CCACHE_SLOPPINESS in the launcher); SHARDPLAN_PCH=OFF turns them off.
option(SHARDPLAN_PCH "Precompile the heavy third-party headers per target" ON)

# shardplan_pch(TARGET HEADER...): TARGET's files are compiled with HEADER... precompiled (`<name>` form).
function(shardplan_pch target)
  if(SHARDPLAN_PCH)
    target_precompile_headers(${target} PRIVATE ${ARGN})
  endif()
endfunction()
