// The .mks file: a whole Schedule in little-endian binary — magic "MKSCHED\0", u32 version
// (kScheduleVersion), the target, model dims, layout, weights, buffers, counters and streams of
// 128-byte instruction records — closed by an FNV-1a 64 checksum of every byte before it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "scheduler/schedule.hpp"

namespace mk {

std::vector<uint8_t> serialize_schedule(const Schedule& schedule);
// Throws mk::Error naming the file and what is wrong: bad magic, another version, checksum
// mismatch, truncation, or a count that cannot fit the bytes left. `name` is used in messages only.
Schedule parse_schedule(const uint8_t* bytes, size_t size, const std::string& name);

void save_schedule(const Schedule& schedule, const std::string& path);
Schedule load_schedule(const std::string& path);

// For people and tools: the schedule as JSON, each instruction with its op name, waits (counter
// name, guarded operand, target), signals, raw args and description.
std::string schedule_to_json(const Schedule& schedule);

}  // namespace mk
