package io.laneway.lane;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.junit.jupiter.api.Test;

class EntryRulesTest {
    /** A call with these attachments (and headers, by the same names), and these arguments. */
    private static EntryRules.Call call(Map<String, String> attachments, Object... arguments) {
        return new EntryRules.Call() {
            @Override
            public String attachment(String key) {
                return attachments.get(key);
            }

            @Override
            public String argument(int index) {
                return index < arguments.length ? String.valueOf(arguments[index]) : null;
            }

            @Override
            public String header(String name) {
                return attachments.get(name.toLowerCase());
            }
        };
    }

    private static Map<String, Object> lane(String name, int weight, Object... more) {
        Map<String, Object> lane = new HashMap<>();
        lane.put("name", name);
        lane.put("weight", weight);
        for (int i = 0; i < more.length; i += 2) {
            lane.put((String) more[i], more[i + 1]);
        }
        return lane;
    }

    private static EntryRules rules(Object... lanes) {
        return EntryRules.of(Map.of("key", "order-service", "lanes", List.of(lanes)));
    }

    @Test
    void weightsShareTheRollInLaneOrder() {
        EntryRules rules = rules(lane("dev-alice", 5), lane("gray", 10));
        Map<String, String> none = Map.of();
        assertEquals("dev-alice", rules.draw(call(none), 0));
        assertEquals("dev-alice", rules.draw(call(none), 4));
        assertEquals("gray", rules.draw(call(none), 5));
        assertEquals("gray", rules.draw(call(none), 14));
        assertNull(rules.draw(call(none), 15));
        assertNull(rules.draw(call(none), 99));
    }

    @Test
    void conditionsComeFirstAndTakeDubboValues() {
        EntryRules rules = rules(
                lane("vip", 0, "conditions", List.of(Map.of("argument", 0, "values", "vip-*,gold"))),
                lane("gray", 0, "conditions", List.of(Map.of("attachment", "user_id", "values", "1~100,-5~-1"))),
                lane("tenant", 0, "conditions", List.of(Map.of("header", "X-Tenant", "values", "a*c*e"))));
        assertEquals("gray", rules.draw(call(Map.of("user_id", "1")), 0));
        assertEquals("gray", rules.draw(call(Map.of("user_id", "100")), 0));
        assertEquals("gray", rules.draw(call(Map.of("user_id", "-3")), 0));
        assertNull(rules.draw(call(Map.of("user_id", "101")), 0));
        assertNull(rules.draw(call(Map.of("user_id", "abc")), 0));
        assertEquals("vip", rules.draw(call(Map.of(), "vip-7"), 0));
        assertEquals("vip", rules.draw(call(Map.of(), "gold"), 0));
        assertNull(rules.draw(call(Map.of(), "golden"), 0));
        assertEquals("tenant", rules.draw(call(Map.of("x-tenant", "abcde")), 0));
        assertNull(rules.draw(call(Map.of("x-tenant", "abcd")), 0));
        assertNull(rules.draw(call(Map.of()), 0), "no weight, no condition met: baseline");
    }

    @Test
    void aStickyLaneDrawsEachValueTheSameWayEveryTime() {
        EntryRules rules = rules(lane("gray", 10, "sticky", Map.of("attachment", "user_id")));
        int in = 0;
        for (int user = 1; user <= 1000; user++) {
            Map<String, String> a = Map.of("user_id", Integer.toString(user));
            String first = rules.draw(call(a), 0);
            for (int roll = 0; roll < 100; roll += 7) {
                assertEquals(first, rules.draw(call(a), roll), "user " + user);
            }
            assertEquals(EntryRules.stickyRoll(Integer.toString(user)) < 10 ? "gray" : null, first);
            in += first == null ? 0 : 1;
        }
        assertTrue(in > 60 && in < 140, "about 10% of users: " + in);
        assertNull(rules.draw(call(Map.of()), 0), "a call without the key is not drawn");
    }

    @Test
    void noLanesDrawNothingAndAMalformedDocumentIsRefused() {
        assertTrue(EntryRules.of(Map.of("key", "x", "lanes", List.of())).isEmpty());
        assertFalse(rules(lane("gray", 1)).isEmpty());
        assertThrows(IllegalArgumentException.class, () -> EntryRules.of("text"));
        assertThrows(IllegalArgumentException.class, () -> rules(lane("not a lane", 10)));
        assertThrows(IllegalArgumentException.class,
                () -> rules(lane("gray", 0, "conditions", List.of(Map.of("attachment", "u", "values", "1~x")))));
    }

    @Test
    void servingIsMarkedApartFromTheLane() {
        assertFalse(Lane.serving());
        boolean previous = Lane.serving(true);
        assertTrue(Lane.serving());
        Lane.serving(previous);
        assertFalse(Lane.serving());
    }
}
