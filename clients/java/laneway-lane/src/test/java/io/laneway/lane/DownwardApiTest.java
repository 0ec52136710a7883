package io.laneway.lane;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import org.junit.jupiter.api.Test;

class DownwardApiTest {
    private static String unquote(String s) {
        return DownwardApi.unquote(s, 0, s.length());
    }

    @Test
    void unquotesWhatGoStrconvQuoteWrites() {
        assertEquals("dev-alice", unquote("\"dev-alice\""));
        assertEquals("", unquote("\"\""));
        assertEquals("a\"b\\c", unquote("\"a\\\"b\\\\c\""));
        assertEquals("\u0007\b\f\n\r\t\u000b'", unquote("\"\\a\\b\\f\\n\\r\\t\\v\\'\""));
        assertEquals("A-\u00e9\ud83d\ude00", unquote("\"\\x41\\u002d\\u00e9\\U0001F600\""));
        assertEquals("A", unquote("\"\\101\""));
        assertEquals("caf\u00e9", unquote("\"caf\u00e9\""));
    }

    @Test
    void rejectsWhatGoStrconvUnquoteRejects() {
        for (String bad : new String[] {"", "\"", "dev", "\"dev", "dev\"", "\"a\"b\"", "\"\\\"", "\"\\q\"",
                "\"\\x4\"", "\"\\xzz\"", "\"\\u12\"", "\"\\U0011FFFF\"", "\"\\8\"", "\"\\xff\""}) {
            assertNull(unquote(bad), bad);
        }
    }

    @Test
    void findsTheValueOfTheExactKey() {
        String file = "app=\"shop\"\nlaneway.io/lane=\"gray\"\nlaneway.io/lane-owner=\"x\"";
        assertEquals("gray", DownwardApi.labelValue(file, "laneway.io/lane"));
        assertEquals("x", DownwardApi.labelValue(file, "laneway.io/lane-owner"));
        assertEquals("shop", DownwardApi.labelValue(file, "app"));
        assertNull(DownwardApi.labelValue(file, "ap"));
        assertNull(DownwardApi.labelValue("", "app"));
        assertNull(DownwardApi.labelValue("app=", "app"));
    }
}
