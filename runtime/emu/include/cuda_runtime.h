// The emulated build's <cuda_runtime.h>: the emulator's host API and its device built-ins.
#pragma once
#include "mk_emu/device.hpp"
#include "mk_emu/runtime_api.hpp"
