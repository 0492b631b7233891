// UTF-8 validity as protobuf checks it for proto3 string fields (and JSON and safetensors names
// need): well-formed sequences only, no overlong forms, no surrogates, nothing above U+10FFFF.
// A string that fails it cannot be stored in a job record or a checkpoint index.
//
// E.g.
//   if (!IsValidUtf8(name)) return absl::InvalidArgumentError("name: is not valid UTF-8");
#ifndef WEFT_COMMON_UTF8_H_
#define WEFT_COMMON_UTF8_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace weft {

// The length of the well-formed UTF-8 sequence that starts at s[i] (i < s.size()); 0 when none
// does (a stray or overlong byte, a surrogate, a cut sequence).
inline size_t Utf8SequenceLength(absl::string_view s, size_t i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return 1;
  int extra;
  unsigned char low = 0x80, high = 0xbf;  // the range of the byte after the lead
  if (c >= 0xc2 && c <= 0xdf) {
    extra = 1;
  } else if (c >= 0xe0 && c <= 0xef) {
    extra = 2;
    if (c == 0xe0) low = 0xa0;   // overlong
    if (c == 0xed) high = 0x9f;  // surrogates
  } else if (c >= 0xf0 && c <= 0xf4) {
    extra = 3;
    if (c == 0xf0) low = 0x90;   // overlong
    if (c == 0xf4) high = 0x8f;  // above U+10FFFF
  } else {
    return 0;  // a continuation byte, an overlong 2-byte lead, or above 0xf4
  }
  if (s.size() - i <= static_cast<size_t>(extra)) return 0;
  for (int k = 1; k <= extra; ++k) {
    const unsigned char b = static_cast<unsigned char>(s[i + k]);
    if (b < (k == 1 ? low : 0x80) || b > (k == 1 ? high : 0xbf)) return 0;
  }
  return 1 + extra;
}

// The byte offset of the first byte of `s` that starts no well-formed sequence; npos when `s`
// is valid UTF-8.
inline size_t FirstInvalidUtf8(absl::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = Utf8SequenceLength(s, i);
    if (n == 0) return i;
    i += n;
  }
  return absl::string_view::npos;
}

inline bool IsValidUtf8(absl::string_view s) {
  return FirstInvalidUtf8(s) == absl::string_view::npos;
}

// `s` with every byte that starts no well-formed sequence replaced by U+FFFD, so that text from
// outside (a log line quoting a path) can go into a proto3 string.
inline std::string ReplaceInvalidUtf8(absl::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t n = Utf8SequenceLength(s, i);
    if (n == 0) {
      out.append("\xef\xbf\xbd");
      ++i;
    } else {
      out.append(s.data() + i, n);
      i += n;
    }
  }
  return out;
}

// The longest prefix of `s` (valid UTF-8) of at most max_bytes that ends between characters.
inline absl::string_view Utf8Prefix(absl::string_view s, size_t max_bytes) {
  if (s.size() <= max_bytes) return s;
  size_t end = max_bytes;
  // Back off the continuation bytes (10xxxxxx) of the character the cut falls in.
  while (end > 0 && (static_cast<unsigned char>(s[end]) & 0xc0) == 0x80) --end;
  return s.substr(0, end);
}

// The byte offset of the first control character in `s` (C0 U+0000..U+001F, DEL U+007F, or C1
// U+0080..U+009F, which is 0xc2 0x80..0x9f in UTF-8); npos when none. A terminal acts on them: a
// name holding ESC rewrites what `weftctl list` shows, a CR or LF forges a log line.
inline size_t FirstControlCharacter(absl::string_view s) {
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) return i;
    if (c == 0xc2 && i + 1 < s.size()) {
      const unsigned char next = static_cast<unsigned char>(s[i + 1]);
      if (next >= 0x80 && next <= 0x9f) return i;
    }
  }
  return absl::string_view::npos;
}

// `s` with each control character (FirstControlCharacter's) written as \xNN (C1 ones as their two
// bytes), so that text from a job record is printed as text.
inline std::string EscapeControlCharacters(absl::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    const size_t at = FirstControlCharacter(s.substr(i, 2));
    if (at != 0) {
      out.push_back(s[i]);
      continue;
    }
    const size_t n = static_cast<unsigned char>(s[i]) == 0xc2 ? 2 : 1;
    for (size_t k = 0; k < n; ++k) {
      const unsigned char c = static_cast<unsigned char>(s[i + k]);
      out.append({'\\', 'x', kHex[c >> 4], kHex[c & 15]});
    }
    i += n - 1;
  }
  return out;
}

}  // namespace weft

#endif  // WEFT_COMMON_UTF8_H_
