# The independent float64 oracle (tests/reference/*.py) as CTest fixtures: each writes its JSON into
# ${MK_TESTDATA} once per ctest run, and the C++ tests that compare against it require the fixture.
# Needs a Python with numpy, gguf and tokenizers (MK_PYTHON, else python3 if it has them); without one,
# nothing is registered.

set(_oracle_py "${MK_PYTHON}")
if(NOT _oracle_py)
  find_package(Python3 COMPONENTS Interpreter QUIET)
  set(_oracle_py "${Python3_EXECUTABLE}")
endif()
if(_oracle_py)
  execute_process(COMMAND "${_oracle_py}" -c "import numpy, gguf, tokenizers"
                  RESULT_VARIABLE _oracle_rc OUTPUT_QUIET ERROR_QUIET)
endif()
if(NOT _oracle_py OR NOT _oracle_rc EQUAL 0)
  message(WARNING "mk: no Python with numpy, gguf and tokenizers ('${_oracle_py}'): the oracle tests are not registered. "
                  "Run tools/setup.sh --test and pass -DMK_PYTHON=$HOME/.cache/mk/oracle-venv/bin/python")
  return()
endif()
message(STATUS "mk: oracle python ${_oracle_py}")

set(_ref ${CMAKE_CURRENT_LIST_DIR})
if(NOT "$ENV{MK_CACHE}" STREQUAL "")
  set(_oracle_model "$ENV{MK_CACHE}/SmolLM2-135M-Instruct.Q4_1.gguf")
else()
  set(_oracle_model "$ENV{HOME}/.cache/mk/SmolLM2-135M-Instruct.Q4_1.gguf")
endif()
# No .pyc in the source tree; one BLAS thread (two spin against each other on a shared 2-core machine).
set(_oracle_env PYTHONDONTWRITEBYTECODE=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1)

function(mk_oracle_test name)
  cmake_parse_arguments(T "" "SETUP;TIMEOUT" "COMMAND" ${ARGN})
  add_test(NAME ${name} COMMAND "${_oracle_py}" ${T_COMMAND})
  set_tests_properties(${name} PROPERTIES ENVIRONMENT "${_oracle_env}" LABELS oracle
                       TIMEOUT ${T_TIMEOUT} SKIP_RETURN_CODE 77)
  if(T_SETUP)
    set_tests_properties(${name} PROPERTIES FIXTURES_SETUP ${T_SETUP} FIXTURES_REQUIRED testdata)
  endif()
endfunction()

# The oracle against a dense float64 forward and the documented quant layouts.
mk_oracle_test(oracle.self_check TIMEOUT 120 COMMAND ${_ref}/self_check.py)

# Token ids of ~40 strings from an HF tokenizers BPE built from the model's own vocabulary and merges.
mk_oracle_test(oracle.tokenizer SETUP oracle_tokenizer TIMEOUT 120
  COMMAND ${_ref}/tokenizer_oracle.py --skip-if-missing --model ${_oracle_model} --out ${MK_TESTDATA}/tokenizer_oracle.json)

# The real SmolLM2: logits at every prompt position and 32 greedy tokens.
# "The capital of France is" must continue with " Paris" (id 7042): a sanity check of the oracle itself.
mk_oracle_test(oracle.smollm2.france SETUP oracle_smollm2 TIMEOUT 300
  COMMAND ${_ref}/oracle.py greedy --skip-if-missing --model ${_oracle_model} --n 32 --expect 7042
          --tokens 504,3575,282,4649,314 --out ${MK_TESTDATA}/oracle_smollm2_france.json)
# "The Eiffel Tower was completed in 1889 and is located in" (16 tokens; continues "... Paris.").
mk_oracle_test(oracle.smollm2.eiffel SETUP oracle_smollm2 TIMEOUT 300
  COMMAND ${_ref}/oracle.py greedy --skip-if-missing --model ${_oracle_model} --n 32 --expect 7042
          --tokens 504,414,46682,18669,436,5371,281,216,33,40,40,41,284,314,3807,281
          --out ${MK_TESTDATA}/oracle_smollm2_eiffel.json)

# A long prompt: "The unanimous Declaration of the thirteen united States of America." through "We hold these truths
# to be self-evident," (tests/data/declaration-gettysburg.txt, 104 tokens by the oracle's tokenizer), 32 greedy
# tokens (" that all men are created equal, ..."); the prompt as one causal batch (float64 either way: 27 -> 19 s). Read
# by the SmolLM2 prefill test, which the sanitizer builds skip.
if(NOT MK_SANITIZE)
  string(CONCAT _long_prompt
  "504,45813,14434,282,260,22063,12787,1918,282,2493,30,198,198,2427,281,260,6418,282,1205,2466,28,357,"
  "3207,2371,327,582,701,288,23738,260,2356,12299,527,457,4395,601,351,1372,28,284,288,7635,1486,260,"
  "6599,282,260,3103,28,260,4447,284,4037,5729,288,527,260,18482,282,6447,284,282,6447,506,1839,1013,"
  "2791,601,28,253,12341,2265,288,260,8428,282,15475,3073,338,502,868,17135,260,2981,527,521,299,601,"
  "288,260,10130,30,198,198,1882,2205,623,17414,288,325,639,29,46115,28")
  mk_oracle_test(oracle.smollm2.long SETUP oracle_smollm2 TIMEOUT 300
    COMMAND ${_ref}/oracle.py greedy --skip-if-missing --model ${_oracle_model} --n 32 --expect 511,1800,359,2312,4037
            --chunk 104 --tokens ${_long_prompt} --out ${MK_TESTDATA}/oracle_smollm2_long.json)
endif()

# The sampling rule (every filter alone and combined) on fixed logits, with its own Philox4x32-10.
mk_oracle_test(oracle.sampling SETUP oracle_sampling TIMEOUT 120
  COMMAND ${_ref}/sampling_oracle.py --out ${MK_TESTDATA}/sampling_oracle.json)

# Perplexity by llama-perplexity's method on SmolLM2 over tests/data/declaration-gettysburg.txt (the US
# Declaration of Independence and the Gettysburg Address, public domain): 4 chunks of 128 tokens, the oracle's
# own tokenizer and float64 forward (~12 s of CPU), then `mk perplexity` on the same text within 0.5%.
if(TARGET mk)
  mk_oracle_test(oracle.perplexity SETUP oracle_perplexity TIMEOUT 300
    COMMAND ${_ref}/perplexity_oracle.py oracle --skip-if-missing --model ${_oracle_model} --ctx 128 --chunks 4
            --text ${PROJECT_SOURCE_DIR}/tests/data/declaration-gettysburg.txt --out ${MK_TESTDATA}/perplexity_oracle.json)
  # A chunk in prefill steps keeping every token's logits: at the default -b (one step a chunk), in uneven steps
  # (-b 50: 50, 50, 27) and token by token (-b 1).
  mk_oracle_test(perplexity.smollm2 TIMEOUT 300
    COMMAND ${_ref}/perplexity_oracle.py check --mk $<TARGET_FILE:mk> --oracle ${MK_TESTDATA}/perplexity_oracle.json)
  set_tests_properties(perplexity.smollm2 PROPERTIES FIXTURES_REQUIRED "testdata;oracle_perplexity")
  # Not in the sanitizer builds: the same ops and step arithmetic as the synthetic prefill tests there (uneven
  # chunks: 64 + 7 + 4), at 38 + 57 s of ASan's 294 (2026-12-07, -O1).
  if(NOT MK_SANITIZE)
    mk_oracle_test(perplexity.smollm2.b50 TIMEOUT 300
      COMMAND ${_ref}/perplexity_oracle.py check --mk $<TARGET_FILE:mk> --oracle ${MK_TESTDATA}/perplexity_oracle.json
              -- -b 50)
    mk_oracle_test(perplexity.smollm2.b1 TIMEOUT 300
      COMMAND ${_ref}/perplexity_oracle.py check --mk $<TARGET_FILE:mk> --oracle ${MK_TESTDATA}/perplexity_oracle.json
              -- -b 1)
    set_tests_properties(perplexity.smollm2.b50 perplexity.smollm2.b1
      PROPERTIES FIXTURES_REQUIRED "testdata;oracle_perplexity")
  endif()
endif()

# Synthetic models written by `mk synth`, then the oracle on the file: NAME SPEC pairs.
set(_oracle_synthetic
  tiny-llama-f32          synthetic:tiny-llama:f32
  tiny-llama-bf16         synthetic:tiny-llama:bf16
  tiny-llama-q8_0         synthetic:tiny-llama:q8_0
  tiny-llama-q4_0         synthetic:tiny-llama:q4_0
  tiny-llama-q4_1         synthetic:tiny-llama:q4_1
  tiny-llama-q4_k         synthetic:tiny-llama:q4_k
  tiny-llama-q6_k         synthetic:tiny-llama:q6_k
  tiny-llama-bf16-st      synthetic:tiny-llama:bf16:format=safetensors
  tiny-llama3-bf16        synthetic:tiny-llama3:bf16
  tiny-llama3-bf16-st     synthetic:tiny-llama3:bf16:format=safetensors
  tiny-qwen2-q8_0         synthetic:tiny-qwen2:q8_0
  tiny-qwen2-bf16-st      synthetic:tiny-qwen2:bf16:format=safetensors
  tiny-qwen3-bf16         synthetic:tiny-qwen3:bf16
  tiny-qwen3-q4_1         synthetic:tiny-qwen3:q4_1
  tiny-qwen3-bf16-st      synthetic:tiny-qwen3:bf16:format=safetensors
  llama-3.2-1b-l2-bf16    synthetic:llama-3.2-1b:bf16:layers=2:vocab=4096
  llama-3.2-1b-l2-q4_1    synthetic:llama-3.2-1b:q4_1:layers=2:vocab=4096
  smollm2-135m-l2-q4_1    synthetic:smollm2-135m:q4_1:layers=2
  qwen2-0.5b-l2-q8_0      synthetic:qwen2-0.5b:q8_0:layers=2:vocab=4096
  qwen3-0.6b-l2-bf16-st   synthetic:qwen3-0.6b:bf16:layers=2:vocab=4096:format=safetensors
)
if(TARGET mk)
  while(_oracle_synthetic)
    list(POP_FRONT _oracle_synthetic _name _spec)
    mk_oracle_test(oracle.synthetic.${_name} SETUP oracle_synthetic TIMEOUT 300
      COMMAND ${_ref}/run_synthetic.py make --mk $<TARGET_FILE:mk> --name ${_name} --spec ${_spec} --out-dir ${MK_TESTDATA})
  endwhile()
  # One model in GGUF and in safetensors must give the same logits: GGUF llama's permuted Q/K rows with
  # adjacent-pair RoPE vs HF rotate-half, tensor names, and (llama3) rope_freqs divisors stored in f32 vs
  # config.json's rope_scaling computed in float64 (1e-9 there; measured 1.3e-11).
  foreach(_pair "tiny-llama-bf16;tiny-llama-bf16-st;1e-12" "tiny-qwen3-bf16;tiny-qwen3-bf16-st;1e-12"
                "tiny-llama3-bf16;tiny-llama3-bf16-st;1e-9")
    list(GET _pair 0 _a)
    list(GET _pair 1 _b)
    list(GET _pair 2 _tol)
    mk_oracle_test(oracle.synthetic_formats.${_a} TIMEOUT 60
      COMMAND ${_ref}/run_synthetic.py compare ${_a} ${_b} --tol ${_tol} --out-dir ${MK_TESTDATA})
    set_tests_properties(oracle.synthetic_formats.${_a} PROPERTIES FIXTURES_REQUIRED oracle_synthetic)
  endforeach()
endif()

# C++ test executables that read the oracle's files also require its fixtures. catch_discover_tests(PROPERTIES
# FIXTURES_REQUIRED "a;b") flattens the list (Catch2 2.13 keeps "a", drops "b" silently), so the property is set
# after discovery, from a file ctest includes after Catch's own (which defines <target>_TESTS).
function(mk_oracle_consumer target)
  if(NOT TARGET ${target})
    return()
  endif()
  set(file ${CMAKE_CURRENT_BINARY_DIR}/${target}_oracle_fixtures.cmake)
  string(JOIN ";" fixtures testdata ${ARGN})
  file(WRITE ${file} "if(${target}_TESTS)\n"
    "  set_tests_properties(\${${target}_TESTS} PROPERTIES FIXTURES_REQUIRED \"${fixtures}\")\n"
    "endif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${file})
endfunction()
mk_oracle_consumer(mk_models_tests oracle_tokenizer)
