package io.laneway.lane.dubbo;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.concurrent.atomic.AtomicBoolean;

import io.laneway.lane.EntryRules;
import io.laneway.lane.Lane;
import org.apache.dubbo.rpc.RpcContext;
import org.apache.dubbo.rpc.RpcInvocation;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

class DubboEntryTest {
    /** The document laneway's operator writes (src/lanes/registries/entry.rs renders it so). */
    private static final String DOCUMENT = "{\n"
            + "  \"key\": \"order-service\",\n"
            + "  \"lanes\": [\n"
            + "    {\n"
            + "      \"name\": \"gray\",\n"
            + "      \"weight\": 10,\n"
            + "      \"sticky\": {\n"
            + "        \"attachment\": \"user_id\"\n"
            + "      },\n"
            + "      \"conditions\": [\n"
            + "        {\n"
            + "          \"argument\": 1,\n"
            + "          \"values\": \"vip\"\n"
            + "        }\n"
            + "      ]\n"
            + "    }\n"
            + "  ]\n"
            + "}\n";

    @AfterEach
    void clean() {
        RpcContext.removeContext();
    }

    private static RpcInvocation invocation(String userId, Object... arguments) {
        RpcInvocation inv = new RpcInvocation();
        inv.setArguments(arguments);
        if (userId != null) {
            inv.setAttachment("user_id", userId);
        }
        return inv;
    }

    @Test
    void theOperatorsDocumentReadsWithSnakeYaml() {
        EntryRules rules = DubboEntry.parse(DOCUMENT);
        assertFalse(rules.isEmpty());
        assertEquals("gray", rules.draw(new DubboEntry.DubboCall(invocation(null, "order-1", "vip")), 99),
                "the argument condition lets the call in whatever the weight");
        String user = "42";
        String expected = EntryRules.stickyRoll(user) < 10 ? "gray" : null;
        for (int roll = 0; roll < 100; roll++) {
            assertEquals(expected, rules.draw(new DubboEntry.DubboCall(invocation(user, "order-1", "plain")), roll));
        }
        assertNull(rules.draw(new DubboEntry.DubboCall(invocation(null, "order-1")), 0),
                "no sticky key, no argument 1: not drawn");
        assertTrue(DubboEntry.parse("{\"key\": \"order-service\", \"lanes\": []}").isEmpty());
    }

    @Test
    void aProviderServingACallMarksTheThreadSoItsCallsAreNeverDrawn() {
        AtomicBoolean serving = new AtomicBoolean();
        assertFalse(Lane.serving());
        Fixtures.serve(Fixtures.incoming(), in -> {
            serving.set(Lane.serving());
            return "ok";
        });
        assertTrue(serving.get(), "a call in no lane is still a request being served");
        assertFalse(Lane.serving());
    }

    @Test
    void withoutProvidersNothingIsDrawn() {
        assertTrue(DubboEntry.rulesOf(Fixtures.invoker(Fixtures.CONSUMER_URL, in -> "ok")).isEmpty());
    }
}
