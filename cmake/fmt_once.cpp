// fmt's compiled part, built once into mk_fmt: every other translation unit includes fmt's headers
// without FMT_HEADER_ONLY, so format-inl.h is compiled here alone (header-only fmt cost ~6 s per file:
// scheduler/graph.cpp took 9 s with it, 2.9 s without, issue 17). Debian's shared libfmt is not used,
// so the binaries carried to a GPU machine need no libfmt there.
#include <fmt/format-inl.h>

FMT_BEGIN_NAMESPACE
FMT_BEGIN_DETAIL_NAMESPACE

// The templates fmt's headers declare but define only in format-inl.h, for the types mk formats.
template auto dragonbox::to_decimal(float x) noexcept -> dragonbox::decimal_fp<float>;
template auto dragonbox::to_decimal(double x) noexcept -> dragonbox::decimal_fp<double>;
template locale_ref::locale_ref(const std::locale& loc);
template auto locale_ref::get<std::locale>() const -> std::locale;
template auto thousands_sep_impl(locale_ref) -> thousands_sep_result<char>;
template auto thousands_sep_impl(locale_ref) -> thousands_sep_result<wchar_t>;
template auto decimal_point_impl(locale_ref) -> char;
template auto decimal_point_impl(locale_ref) -> wchar_t;

FMT_END_DETAIL_NAMESPACE
FMT_END_NAMESPACE
