// The mk C++ API: load a model, compile or load a schedule, run sessions. Link mk::mk
// (find_package(mk)). Every error is thrown as mk::Error; the library never prints or exits.
#pragma once
#include "mk/error.hpp"
#include "mk/model.hpp"
#include "mk/options.hpp"
#include "mk/schedule.hpp"
#include "mk/session.hpp"
