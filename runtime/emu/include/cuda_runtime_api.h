// The emulated build's <cuda_runtime_api.h>: the CUDA emulator's host API (mk_emu/runtime_api.hpp).
#pragma once
#include "mk_emu/runtime_api.hpp"
