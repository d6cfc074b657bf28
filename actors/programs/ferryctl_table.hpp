#pragma once
// Aligned text tables for ferryctl's human-readable output (ferryctl_main.cpp,
// ferryctl_dlq.cpp): columns as wide as their widest cell, two spaces apart.

#include <algorithm>
#include <cstddef>
#include <iostream>
#include <string>
#include <vector>

namespace ferry::ctl {

/// Prints `header` and `rows` as aligned columns on stdout.
inline void print_table(const std::vector<std::string>& header,
                        const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(header.size());
  for (size_t i = 0; i < header.size(); ++i)
    width[i] = header[i].size();
  for (auto& r : rows)
    for (size_t i = 0; i < r.size() && i < width.size(); ++i)
      width[i] = std::max(width[i], r[i].size());
  auto line = [&](const std::vector<std::string>& r) {
    std::string out;
    for (size_t i = 0; i < r.size(); ++i) {
      out += r[i];
      if (i + 1 < r.size())
        out += std::string(width[i] - r[i].size() + 2, ' ');
    }
    std::cout << out << '\n';
  };
  line(header);
  for (auto& r : rows)
    line(r);
}

} // namespace ferry::ctl
