package io.laneway.lane;

/**
 * The kubelet's downward-API format for labels and annotations: one {@code key="value"} line per
 * entry, the value quoted as Go's {@code strconv.Quote} does.
 */
final class DownwardApi {
    private DownwardApi() {}

    /** The unquoted value of {@code key} in {@code text}, or {@code null} when absent or malformed. */
    static String labelValue(String text, String key) {
        int start = 0;
        int n = text.length();
        while (start < n) {
            int end = text.indexOf('\n', start);
            if (end < 0) {
                end = n;
            }
            int lineEnd = end > start && text.charAt(end - 1) == '\r' ? end - 1 : end;
            int keyEnd = start + key.length();
            if (keyEnd < lineEnd && text.charAt(keyEnd) == '=' && text.startsWith(key, start)) {
                return unquote(text, keyEnd + 1, lineEnd);
            }
            start = end + 1;
        }
        return null;
    }

    /** Go's {@code strconv.Unquote} of a double-quoted {@code s[from, to)}; {@code null} if malformed. */
    static String unquote(String s, int from, int to) {
        if (to - from < 2 || s.charAt(from) != '"' || s.charAt(to - 1) != '"') {
            return null;
        }
        int i = from + 1;
        int end = to - 1;
        if (s.indexOf('\\', i) < 0 || s.indexOf('\\', i) >= end) {
            String plain = s.substring(i, end);
            return plain.indexOf('"') < 0 ? plain : null;
        }
        StringBuilder out = new StringBuilder(end - i);
        while (i < end) {
            char c = s.charAt(i++);
            if (c == '"') {
                return null;
            }
            if (c != '\\') {
                out.append(c);
                continue;
            }
            if (i >= end) {
                return null;
            }
            char e = s.charAt(i++);
            switch (e) {
                case 'a': out.append('\u0007'); break;
                case 'b': out.append('\b'); break;
                case 'f': out.append('\f'); break;
                case 'n': out.append('\n'); break;
                case 'r': out.append('\r'); break;
                case 't': out.append('\t'); break;
                case 'v': out.append('\u000b'); break;
                case '\\': out.append('\\'); break;
                case '"': out.append('"'); break;
                case '\'': out.append('\''); break;
                case 'x':
                case 'u':
                case 'U': {
                    int digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
                    int cp = parse(s, i, end, digits, 16);
                    if (cp < 0 || cp > Character.MAX_CODE_POINT) {
                        return null;
                    }
                    // \x is one byte of UTF-8 in Go; only the ASCII ones can be part of a lane
                    if (e == 'x' && cp > 0x7f) {
                        return null;
                    }
                    out.appendCodePoint(cp);
                    i += digits;
                    break;
                }
                case '0': case '1': case '2': case '3': case '4': case '5': case '6': case '7': {
                    int cp = parse(s, i - 1, end, 3, 8);
                    if (cp < 0 || cp > 0x7f) {
                        return null;
                    }
                    out.append((char) cp);
                    i += 2;
                    break;
                }
                default:
                    return null;
            }
        }
        return out.toString();
    }

    private static int parse(String s, int from, int end, int digits, int radix) {
        if (from + digits > end) {
            return -1;
        }
        int v = 0;
        for (int k = from; k < from + digits; k++) {
            int d = Character.digit(s.charAt(k), radix);
            if (d < 0) {
                return -1;
            }
            v = v * radix + d;
        }
        return v;
    }
}
