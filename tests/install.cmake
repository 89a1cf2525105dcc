# Installs the build into a fresh prefix, moves the prefix, and trains a few
# steps with the SentencePiece tokenizer from the moved binary: it must load
# the plugin of its own prefix (lib/baton/, found from /proc/self/exe), not
# the build tree's, and say so in its log. Then BATON_SENTENCEPIECE_PLUGIN
# naming a missing file must fail (exit 1) naming it. Run by ctest as
#   cmake -DBUILD_DIR=<build> -DSOURCE_DIR=<repo> -DPREFIX=<tmp> \
#         -P tests/install.cmake

foreach(var BUILD_DIR SOURCE_DIR PREFIX)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "install.cmake: -D${var}=... is required")
  endif()
endforeach()

set(moved ${PREFIX}.moved)
file(REMOVE_RECURSE ${PREFIX} ${moved})
execute_process(
  COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${PREFIX}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed (${rc}):\n${out}")
endif()
foreach(file bin/baton lib/baton/libbaton_sentencepiece.so)
  if(NOT EXISTS ${PREFIX}/${file})
    message(FATAL_ERROR "the install has no ${file}:\n${out}")
  endif()
endforeach()
# A prefix is relocatable: nothing of its first path is baked in.
file(RENAME ${PREFIX} ${moved})
file(REAL_PATH ${moved} moved)

set(train
  ${moved}/bin/baton train
  --config ${SOURCE_DIR}/configs/debug_model_sp.yaml
  --training.steps=2 --lr_scheduler.warmup_steps=1
  --training.seq_len=32 --training.local_batch_size=2
  --metrics.peak_tflops=1 --metrics.log_freq=1
  --job.dump_folder=${moved}/dump)

execute_process(
  COMMAND ${CMAKE_COMMAND} -E env --unset=BATON_SENTENCEPIECE_PLUGIN
          OMP_WAIT_POLICY=PASSIVE ${train}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "training from the installed binary failed (${rc}):\n${out}")
endif()
set(expected "SentencePiece: plugin ${moved}/lib/baton/libbaton_sentencepiece.so")
# The console wraps at 120 columns; its continuation lines start at the
# message column (18 spaces).
string(REGEX REPLACE "\n                  ([^ ])" " \\1" joined "${out}")
string(FIND "${joined}" "${expected}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "the log does not say '${expected}':\n${out}")
endif()
file(STRINGS ${moved}/dump/metrics.jsonl steps)
list(LENGTH steps n)
if(NOT n EQUAL 2)
  message(FATAL_ERROR "metrics.jsonl has ${n} steps, not 2:\n${out}")
endif()

# The variable names the one plugin to load; a missing one is an error
# naming it, not a silent fallback to another.
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env
          BATON_SENTENCEPIECE_PLUGIN=${moved}/missing.so
          OMP_WAIT_POLICY=PASSIVE ${train}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
set(expected "error: [SentencePiece] cannot load the plugin: none found; looked at ${moved}/missing.so;")
string(FIND "${out}" "${expected}" at)
if(NOT rc EQUAL 1 OR at EQUAL -1)
  message(FATAL_ERROR "expected exit 1 and '${expected}', got ${rc}:\n${out}")
endif()
file(REMOVE_RECURSE ${moved})
