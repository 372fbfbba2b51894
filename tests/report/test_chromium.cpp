// Renders each HTML report in headless Chromium at 1400x1000 and checks the screenshot is not blank and the
// page logged no console errors. Where chromium is absent the test fails in CI (CI=true or
// SHARDPLAN_REQUIRE_TOOLS=1, tests/common/tools.hpp) and is skipped with a warning elsewhere. With
// SHARDPLAN_SCREENSHOT_DIR set, the screenshots are also copied there (how docs/img/*.png are made).
#include <unistd.h>
#if SHARDPLAN_HAVE_ZLIB
#include <zlib.h>
#endif

#include <array>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <set>

#include "report_helpers.hpp"
#include "tests/common/tools.hpp"

using namespace shardplan;
using namespace shardplan::test;
namespace fs = std::filesystem;

namespace {

std::string find_chromium() {
  for (const char* name : {"chromium", "chromium-browser", "google-chrome"}) {
    const char* path = std::getenv("PATH");
    std::string p = path ? path : "";
    std::size_t start = 0;
    while (start <= p.size()) {
      const std::size_t end = p.find(':', start);
      const std::string dir = p.substr(start, end == std::string::npos ? std::string::npos : end - start);
      if (!dir.empty()) {
        const fs::path cand = fs::path(dir) / name;
        std::error_code ec;
        if (fs::is_regular_file(cand, ec) && access(cand.c_str(), X_OK) == 0) return cand.string();
      }
      if (end == std::string::npos) break;
      start = end + 1;
    }
  }
  return {};
}

/// Decoded 8-bit RGB(A) PNG: enough of the format for Chromium's screenshots (no interlace, no palette).
struct Image {
  int w = 0, h = 0, channels = 0;
  std::vector<unsigned char> px;
};

std::uint32_t be32(const unsigned char* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | p[3];
}

bool decode_png(const std::string& data, Image& img, std::string& why) {
  const auto* d = reinterpret_cast<const unsigned char*>(data.data());
  if (data.size() < 8 || std::memcmp(d, "\x89PNG\r\n\x1a\n", 8) != 0) return why = "not a PNG", false;
  std::size_t pos = 8;
  std::string idat;
  int depth = 0, ctype = 0, interlace = 0;
  while (pos + 12 <= data.size()) {
    const std::uint32_t len = be32(d + pos);
    const std::string type(data.data() + pos + 4, 4);
    if (pos + 12 + len > data.size()) return why = "truncated chunk", false;
    const unsigned char* body = d + pos + 8;
    if (type == "IHDR") {
      img.w = static_cast<int>(be32(body)), img.h = static_cast<int>(be32(body + 4));
      depth = body[8], ctype = body[9], interlace = body[12];
    } else if (type == "IDAT") {
      idat.append(reinterpret_cast<const char*>(body), len);
    } else if (type == "IEND") {
      break;
    }
    pos += 12 + len;
  }
  if (depth != 8 || (ctype != 2 && ctype != 6) || interlace != 0)
    return why = "unsupported PNG layout", false;
  img.channels = ctype == 6 ? 4 : 3;
#if !SHARDPLAN_HAVE_ZLIB
  (void)idat;
  return why = "no zlib: pixels not decoded", false;
#else
  const std::size_t stride = static_cast<std::size_t>(img.w) * static_cast<std::size_t>(img.channels);
  std::vector<unsigned char> raw((stride + 1) * static_cast<std::size_t>(img.h));
  uLongf out_len = static_cast<uLongf>(raw.size());
  if (uncompress(raw.data(), &out_len, reinterpret_cast<const Bytef*>(idat.data()),
                 static_cast<uLong>(idat.size())) != Z_OK ||
      out_len != raw.size())
    return why = "inflate failed", false;
  img.px.assign(stride * static_cast<std::size_t>(img.h), 0);
  const int bpp = img.channels;
  for (int y = 0; y < img.h; ++y) {
    const unsigned char filter = raw[static_cast<std::size_t>(y) * (stride + 1)];
    const unsigned char* src = &raw[static_cast<std::size_t>(y) * (stride + 1) + 1];
    unsigned char* row = &img.px[static_cast<std::size_t>(y) * stride];
    const unsigned char* up = y > 0 ? row - stride : nullptr;
    for (std::size_t i = 0; i < stride; ++i) {
      const int a = i >= static_cast<std::size_t>(bpp) ? row[i - static_cast<std::size_t>(bpp)] : 0;
      const int b = up ? up[i] : 0;
      const int c = up && i >= static_cast<std::size_t>(bpp) ? up[i - static_cast<std::size_t>(bpp)] : 0;
      int v = src[i];
      switch (filter) {
        case 0:
          break;
        case 1:
          v += a;
          break;
        case 2:
          v += b;
          break;
        case 3:
          v += (a + b) / 2;
          break;
        case 4: {
          const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
          v += pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
          break;
        }
        default:
          return why = "bad filter", false;
      }
      row[i] = static_cast<unsigned char>(v & 0xff);
    }
  }
  return true;
#endif
}

struct Render {
  std::string png, log;
};

/// The shell command that screenshots `html` into dir/STEM.png, logging to dir/STEM.log.
std::string render_command(const std::string& chromium, const fs::path& html, const fs::path& dir) {
  const std::string stem = html.stem().string();
  const fs::path profile = dir / (stem + "-profile");
  fs::create_directories(profile);
  return "timeout 30 '" + chromium +
         "' --headless --no-sandbox --disable-gpu --disable-background-networking "
         "--disable-component-update --no-first-run --hide-scrollbars --enable-logging=stderr --v=0 "
         "--user-data-dir='" +
         profile.string() + "' --screenshot='" + (dir / (stem + ".png")).string() +
         "' --window-size=1400,1000 'file://" + fs::absolute(html).string() + "' > '" +
         (dir / (stem + ".log")).string() + "' 2>&1";
}

/// Console messages in Chromium's log: uncaught exceptions, console output, failed loads.
std::vector<std::string> console_errors(const std::string& log) {
  std::vector<std::string> errs;
  std::size_t start = 0;
  while (start < log.size()) {
    std::size_t end = log.find('\n', start);
    if (end == std::string::npos) end = log.size();
    const std::string line = log.substr(start, end - start);
    // Chromium logs every console message as "...:CONSOLE..." (its level is not always shown): the reports
    // have no scripts, so any console line is unexpected.
    if (line.find("Uncaught") != std::string::npos || line.find(":CONSOLE") != std::string::npos ||
        line.find("net::ERR_") != std::string::npos)
      errs.push_back(line);
    start = end + 1;
  }
  return errs;
}

}  // namespace

TEST_CASE("the console check recognises Chromium's log lines", "[html]") {
  // Lines as Chromium 156 writes them with --enable-logging=stderr --v=0 for a page running
  // console.error("bad thing"); throw new Error("boom"), and the D-Bus noise of a container without a bus.
  const std::string log =
      "[25723:25755:1129/212529.034874:ERROR:dbus/bus.cc:405] Failed to connect to the bus: Failed to "
      "connect to socket\n"
      "[26025:26025:1129/212541.722781:INFO:CONSOLE:1] \"bad thing\", source: file:///tmp/broken.html (1)\n"
      "[26025:26025:1129/212541.724140:INFO:CONSOLE:1] \"Uncaught Error: boom\", source: "
      "file:///tmp/broken.html (1)\n"
      "6703 bytes written to file /tmp/b.png\n";
  CHECK(console_errors(log).size() == 2);
  CHECK(console_errors("[1:1:1/1.1:ERROR:dbus/bus.cc:405] Failed to connect to the bus\n").empty());
}

TEST_CASE("every HTML report renders in headless Chromium: not blank, no console errors",
          "[html][chromium]") {
  const std::string chromium = find_chromium();
  if (chromium.empty())
    SHARDPLAN_MISSING_TOOL("chromium not found on PATH (chromium, chromium-browser, google-chrome)");
  const auto t0 = std::chrono::steady_clock::now();
  const fs::path dir = fs::temp_directory_path() / ("shardplan-html-" + std::to_string(::getpid()));
  fs::create_directories(dir);

  Bench b("llama3-8b", "dgx-h100", 8);
  Simulator sim(b.model, *b.cluster, *b.costs);
  const Result& r = sim.run(b.resolve(example_plan()), true);
  const std::vector<std::pair<std::string, std::string>> pages = {
      {"simulate", html_simulate_report(r, b.inputs())},
      {"plan", html_plan_report(sample_outcome(b), b.model, *b.cluster)},
      {"validate", html_validate_report(sample_validation())}};
  const char* keep = std::getenv("SHARDPLAN_SCREENSHOT_DIR");
  // Render the pages concurrently (each Chromium start costs seconds), then check each.
  std::string cmd;
  for (const auto& [name, html] : pages) {
    const fs::path file = dir / (name + ".html");
    write_text(file.string(), html);
    cmd += "( " + render_command(chromium, file, dir) + " ) & ";
  }
  cmd += "wait";
  const int rc = std::system(cmd.c_str());
  CHECK(rc == 0);
  for (const auto& [name, html] : pages) {
    INFO(name);
    const Render out{read_text((dir / (name + ".png")).string()),
                     read_text((dir / (name + ".log")).string())};
    INFO("chromium log:\n" << out.log.substr(0, 4000));
    REQUIRE(!out.png.empty());
    const auto errs = console_errors(out.log);
    INFO((errs.empty() ? std::string() : errs.front()));
    CHECK(errs.empty());
    if (keep) {
      write_text((fs::path(keep) / (name + ".png")).string(), out.png);
      write_text((fs::path(keep) / (name + ".html")).string(), html);
    }
    Image img;
    std::string why;
    const bool decoded = decode_png(out.png, img, why);
    CHECK(img.w == 1400);
    CHECK(img.h == 1000);
    if (!decoded) {
      // Without zlib: a blank 1400x1000 page compresses to a few kB; a drawn report to far more.
      INFO(why);
      CHECK(out.png.size() > 40'000);
      continue;
    }
    // Not blank: many distinct colours, and a good share of pixels that are not the background.
    std::set<std::uint32_t> colours;
    std::size_t non_bg = 0;
    const std::size_t n = static_cast<std::size_t>(img.w) * static_cast<std::size_t>(img.h);
    for (std::size_t i = 0; i < n; ++i) {
      const unsigned char* p = &img.px[i * static_cast<std::size_t>(img.channels)];
      if (colours.size() < 5000)
        colours.insert((std::uint32_t{p[0]} << 16) | (std::uint32_t{p[1]} << 8) | p[2]);
      if (p[0] < 235 || p[1] < 235 || p[2] < 235) ++non_bg;
    }
    CHECK(colours.size() > 50);
    CHECK(static_cast<double>(non_bg) / static_cast<double>(n) > 0.03);
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  WARN("chromium rendering took " << s << " s");
}
