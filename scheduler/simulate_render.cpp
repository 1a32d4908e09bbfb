// Renders a simulation: Chrome/Perfetto trace JSON and a self-contained SVG Gantt chart.
#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "instructions/registry.hpp"
#include "scheduler/simulate.hpp"

namespace mk {

namespace {

std::string xml_escape(const std::string& text) {
    std::string out;
    for (char c : text) {
        switch (c) {
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '&': out += "&amp;"; break;
            case '"': out += "&quot;"; break;
            default: out += c;
        }
    }
    return out;
}

// Distinct, print-safe colours by opcode (cycled if the op list outgrows them).
const char* op_colour(uint16_t opcode) {
    static const char* const kColours[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                           "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
    return kColours[opcode % (sizeof(kColours) / sizeof(kColours[0]))];
}

// A tick spacing of 1, 2 or 5 x 10^k giving about `n` ticks over `span`.
double tick_step(double span, int n) {
    const double raw = span / n, decade = std::pow(10.0, std::floor(std::log10(raw)));
    for (double m : {1.0, 2.0, 5.0})
        if (m * decade >= raw) return m * decade;
    return 10.0 * decade;
}

}  // namespace

std::string step_time_summary(double step_ns, uint32_t prefill_tokens) {
    if (!prefill_tokens) return fmt::format("{:.3f} ms/token", step_ns / 1e6);
    return fmt::format("{:.3f} ms a {}-token step ({:.0f} tokens/s)", step_ns / 1e6, prefill_tokens,
                       step_ns > 0 ? prefill_tokens / (step_ns / 1e9) : 0.0);
}

std::string simulation_to_chrome_trace(const Schedule& s, const Simulation& sim) {
    using nlohmann::json;
    json events = json::array();
    events.push_back({{"name", "process_name"},
                      {"ph", "M"},
                      {"pid", 0},
                      {"args", {{"name", fmt::format("mk schedule ({}, {} SMs)", s.target.name, s.streams.size())}}}});
    for (uint32_t sm = 0; sm < sim.timeline.size() && sm < s.streams.size(); ++sm) {
        events.push_back({{"name", "thread_name"},
                          {"ph", "M"},
                          {"pid", 0},
                          {"tid", sm},
                          {"args", {{"name", fmt::format("sm {}", sm)}}}});
        events.push_back(
            {{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", 0}, {"tid", sm}, {"args", {{"sort_index", sm}}}});
        for (uint32_t i = 0; i < sim.timeline[sm].size() && i < s.streams[sm].size(); ++i) {
            const Instruction& ins = s.streams[sm][i];
            const SimEvent& ev = sim.timeline[sm][i];
            json args = {{"index", i},
                         {"seq", ins.seq},
                         {"describe", op_info(ins.opcode).describe(ins)},
                         {"ready_us", ev.ready_ns / 1000.0},
                         {"n_waits", ins.n_waits},
                         {"n_pages", ins.n_pages}};
            if (ev.waited_sm != UINT32_MAX) args["waited_on"] = fmt::format("sm {} #{}", ev.waited_sm, ev.waited_index);
            events.push_back({{"name", op_info(ins.opcode).name},
                              {"cat", "instruction"},
                              {"ph", "X"},
                              {"pid", 0},
                              {"tid", sm},
                              {"ts", ev.start_ns / 1000.0},
                              {"dur", (ev.end_ns - ev.start_ns) / 1000.0},
                              {"args", std::move(args)}});
        }
    }
    json trace = {{"traceEvents", std::move(events)},
                  {"displayTimeUnit", "ns"},
                  {"otherData",
                   {{"target", s.target.name},
                    {"policy", s.policy},
                    {"makespan_us", sim.makespan_ns / 1000.0},
                    {"weight_gbs", sim.weight_gbs()}}}};
    return trace.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string simulation_to_svg(const Schedule& s, const Simulation& sim) {
    const uint32_t n_sms = uint32_t(std::min(sim.timeline.size(), s.streams.size()));
    const double left = 56, right = 16, top = 40, plot_w = 1100;
    const double lane = std::clamp(900.0 / std::max(1u, n_sms), 3.0, 18.0);
    const double plot_h = lane * n_sms, axis_y = top + plot_h;
    const double span = sim.makespan_ns > 0 ? sim.makespan_ns : 1.0;
    auto x_of = [&](double t) { return left + t / span * plot_w; };

    std::vector<bool> used(size_t(Opcode::count), false);
    std::string body;
    for (uint32_t sm = 0; sm < n_sms; ++sm) {
        const double y = top + sm * lane;
        if (lane >= 8 || sm % 10 == 0)
            body += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"lane\">sm {}</text>\n", left - 4,
                                y + lane * 0.8, sm);
        for (uint32_t i = 0; i < sim.timeline[sm].size() && i < s.streams[sm].size(); ++i) {
            const Instruction& ins = s.streams[sm][i];
            const SimEvent& ev = sim.timeline[sm][i];
            used[ins.opcode % used.size()] = true;
            body += fmt::format(
                "<rect x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" height=\"{:.2f}\" fill=\"{}\"><title>sm {} #{} {} "
                "[{:.3f}, {:.3f}) us</title></rect>\n",
                x_of(ev.start_ns), y + 0.5, std::max(0.3, x_of(ev.end_ns) - x_of(ev.start_ns)), lane - 1.0,
                op_colour(ins.opcode), sm, i, xml_escape(op_info(ins.opcode).describe(ins)), ev.start_ns / 1000.0,
                ev.end_ns / 1000.0);
        }
    }
    const double step = tick_step(span, 10);
    for (double t = 0; t <= span * 1.0001; t += step)
        body += fmt::format(
            "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" class=\"tick\"/>"
            "<text x=\"{0:.1f}\" y=\"{3:.1f}\" class=\"axis\">{4:g}</text>\n",
            x_of(t), top, axis_y + 4, axis_y + 16, t / 1000.0);
    double legend_x = left;
    const double legend_y = axis_y + 40;
    for (uint16_t op = 0; op < used.size(); ++op) {
        if (!used[op]) continue;
        const std::string name = op_info(op).name;
        body += fmt::format(
            "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"12\" height=\"12\" fill=\"{}\"/>"
            "<text x=\"{:.1f}\" y=\"{:.1f}\">{}</text>\n",
            legend_x, legend_y - 10, op_colour(op), legend_x + 16, legend_y, name);
        legend_x += 28 + 7.0 * name.size();
    }
    const double width = left + plot_w + right, height = legend_y + 16;
    return fmt::format(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0:.0f}\" height=\"{1:.0f}\" viewBox=\"0 0 {0:.0f} "
        "{1:.0f}\" "
        "font-family=\"sans-serif\" font-size=\"11\">\n"
        "<style>.lane{{text-anchor:end;font-size:{2:.0f}px}} .axis{{text-anchor:middle}} .tick{{stroke:#ccc}}</style>\n"
        "<text x=\"{3:.0f}\" y=\"20\" font-size=\"14\">{4} on {5} ({6} SMs): step {7:.2f} us, {8:.0f} GB/s of "
        "weights</text>\n"
        "<text x=\"{9:.1f}\" y=\"{10:.1f}\" class=\"axis\">time (us)</text>\n{11}</svg>\n",
        width, height, std::min(lane * 0.9, 11.0), left, xml_escape(s.policy.empty() ? "schedule" : s.policy),
        xml_escape(s.target.name), n_sms, sim.makespan_ns / 1000.0, sim.weight_gbs(), left + plot_w / 2, axis_y + 30,
        body);
}

}  // namespace mk
