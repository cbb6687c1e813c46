# Runs one libFuzzer binary for a bounded time on a fresh copy of its seed
# corpus. Called by ctest with -DBIN= -DSEEDS= -DWORK= -DSECONDS=; the
# MF_FUZZ_SECONDS environment variable, when set, overrides SECONDS (that is
# how `make fuzz FUZZ_SECONDS=N` runs longer without a reconfigure). A crash
# leaves the failing input in WORK, which is kept until the next run.
if(DEFINED ENV{MF_FUZZ_SECONDS})
  set(SECONDS $ENV{MF_FUZZ_SECONDS})
endif()

file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/corpus)
file(GLOB seeds ${SEEDS}/*)
file(COPY ${seeds} DESTINATION ${WORK}/corpus)

execute_process(
  COMMAND ${BIN} ${WORK}/corpus -max_total_time=${SECONDS} -timeout=10
          -rss_limit_mb=2048 -artifact_prefix=${WORK}/ -print_final_stats=1
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${BIN} failed (${rc}); its input is in ${WORK}/")
endif()
