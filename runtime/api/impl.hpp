// What the public API's handles hold (pimpl), and the guard that turns any other exception escaping
// the library into mk::Error, so the boundary throws one type.
#pragma once
#include <atomic>
#include <exception>
#include <memory>
#include <new>
#include <vector>

#include "mk/model.hpp"
#include "mk/schedule.hpp"
#include "mk/session.hpp"
#include "models/error.hpp"
#include "models/model.hpp"
#include "runtime/engine.hpp"
#include "scheduler/schedule.hpp"

namespace mk::api {

struct Model::Impl {
    explicit Impl(mk::Model m) : model(std::move(m)) {}
    mk::Model model;
};

struct Schedule::Impl {
    mk::Schedule schedule;
};

struct Session::Impl {
    Impl(std::shared_ptr<const Model::Impl> m, std::unique_ptr<Program> program)
        : model(std::move(m)), engine(model->model, std::move(program)) {}
    std::shared_ptr<const Model::Impl> model;  // keeps the weights mapped while the session lives
    Engine engine;
    std::vector<int32_t> tokens;               // in the KV cache, positions 0..n-1
    bool has_logits = false;                   // the program's logits belong to tokens.back()
    bool keep_all_logits = false;              // BackendOptions::all_logits: fill fed_logits on every feed
    std::vector<float> fed_logits;             // (tokens of the last feed, vocab) fp32
    std::atomic<bool> cancel{false};
};

// Checks the ranges (mk::Error naming the bad value) and converts.
SamplingParams to_params(const SamplingOptions& options);
// The conversation in the model's own chat template; throws when it has none.
std::string render_chat(const mk::Model& model, std::span<const ChatMessage> messages, bool add_generation_prompt);

// Runs body(); an exception other than mk::Error (std::filesystem, std::bad_alloc) becomes one.
template <typename Body>
decltype(auto) guard(const char* what, Body&& body) {
    try {
        return body();
    } catch (const Error&) {
        throw;
    } catch (const std::bad_alloc&) {
        throw Error(std::string(what) + ": out of memory");
    } catch (const std::exception& e) {
        throw Error(std::string(what) + ": " + e.what());
    }
}

}  // namespace mk::api
