package io.laneway.lane;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Arrays;

import org.junit.jupiter.api.Test;

class MessageOwnershipTest {
    // as laneway renders it (src/lanes/registries/messages.rs): dev-alice's consumers own
    // dev-alice and dev-carol from 1005000, relabelled out from 1006000
    private static final String DOCUMENT = "{\n"
            + "  \"key\": \"order-service\",\n"
            + "  \"epochs\": [\n"
            + "    {\n      \"from\": 0,\n      \"owners\": {}\n    },\n"
            + "    {\n      \"from\": 1005000,\n      \"owners\": {\n"
            + "        \"dev-alice\": [\n          \"dev-alice\",\n          \"dev-carol\"\n        ]\n      }\n    },\n"
            + "    {\n      \"from\": 1006000,\n      \"owners\": {}\n    }\n"
            + "  ]\n}\n";

    private static final String[] TIERS = {null, "dev-alice", "dev-carol"};

    /** How many tiers handle the message: always exactly one. */
    private static int handlers(MessageOwnership o, String lane, long born) {
        return (int) Arrays.stream(TIERS).filter(t -> o.owns(t, lane, born)).count();
    }

    @Test
    void eachMessageIsOwnedByTheTierOfTheEpochItWasBornIn() {
        MessageOwnership o = MessageOwnership.parse(DOCUMENT);
        assertNull(o.owner("dev-alice", 1_004_999), "before the switch: baseline");
        assertEquals("dev-alice", o.owner("dev-alice", 1_005_000));
        assertEquals("dev-alice", o.owner("dev-carol", 1_005_999), "a lane falling back to dev-alice");
        assertNull(o.owner("dev-alice", 1_006_000), "relabelled out: baseline again");
        assertNull(o.owner(null, 1_005_500), "untagged messages are baseline's");
        assertNull(o.owner("gray", 1_005_500), "a lane no tier lists is baseline's");
        assertTrue(o.owns("dev-alice", "dev-carol", 1_005_500));
        assertFalse(o.owns(null, "dev-carol", 1_005_500));
        assertFalse(o.owns("dev-carol", "dev-carol", 1_005_500), "a tier without consumers owns nothing");
        for (String lane : new String[] {null, "dev-alice", "dev-carol", "gray"}) {
            for (long born : new long[] {-1, 0, 1_004_999, 1_005_000, 1_005_999, 1_006_000, Long.MAX_VALUE}) {
                assertEquals(1, handlers(o, lane, born), lane + " born " + born);
            }
        }
    }

    @Test
    void withoutADocumentBaselineOwnsEverything() {
        assertTrue(MessageOwnership.BASELINE.owns(null, "dev-alice", 5));
        assertFalse(MessageOwnership.BASELINE.owns("dev-alice", "dev-alice", 5));
    }

    @Test
    void aDocumentOfAnotherShapeIsRefused() {
        assertThrows(IllegalArgumentException.class, () -> MessageOwnership.parse("{\"lanes\": []}"));
        assertThrows(IllegalArgumentException.class, () -> MessageOwnership.parse("{\"epochs\": []}"));
        assertThrows(IllegalArgumentException.class,
                () -> MessageOwnership.parse("{\"epochs\": [{\"from\": 5, \"owners\": {}}, {\"from\": 5, \"owners\": {}}]}"));
        assertThrows(IllegalArgumentException.class, () -> MessageOwnership.parse("{\"epochs\": [{\"from\": 0}]"));
        assertThrows(IllegalArgumentException.class,
                () -> MessageOwnership.parse("{\"epochs\": [{\"from\": 0, \"owners\": {\"-x\": [\"a\"]}}]}"));
    }
}
