package io.laneway.lane.spring.cloud;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import java.io.IOException;
import java.net.URI;
import java.util.concurrent.atomic.AtomicReference;

import io.laneway.lane.EntryRules;
import io.laneway.lane.Lane;
import org.junit.jupiter.api.Test;
import org.springframework.http.HttpMethod;
import org.springframework.http.HttpStatus;
import org.springframework.http.client.ClientHttpResponse;
import org.springframework.mock.http.client.MockClientHttpRequest;
import org.springframework.mock.http.client.MockClientHttpResponse;

class EntryDrawTest {
    /** The rules laneway publishes for order-service: gray for tenant acme, and 0% by weight. */
    private static final EntryRules RULES = NacosEntryRules.parse("{\"key\": \"order-service\", \"lanes\": ["
            + "{\"name\": \"gray\", \"weight\": 0, \"conditions\": [{\"header\": \"x-tenant\", \"values\": \"acme,vip-*\"}]}]}");

    /** The lane header the call to {@code uri} goes out with. */
    private static String sent(LaneClientHttpRequestInterceptor interceptor, String uri, String tenant) throws IOException {
        MockClientHttpRequest request = new MockClientHttpRequest(HttpMethod.GET, URI.create(uri));
        if (tenant != null) {
            request.getHeaders().set("x-tenant", tenant);
        }
        AtomicReference<String> lane = new AtomicReference<>();
        ClientHttpResponse response = interceptor.intercept(request, new byte[0], (req, body) -> {
            lane.set(req.getHeaders().getFirst("x-lane"));
            return new MockClientHttpResponse(new byte[0], HttpStatus.OK);
        });
        response.close();
        return lane.get();
    }

    private static final LaneClientHttpRequestInterceptor INTERCEPTOR =
            new LaneClientHttpRequestInterceptor("x-lane", service -> service.equals("order-service") ? RULES : EntryRules.NONE);

    @Test
    void aCallOutsideAnyRequestIsDrawnByTheRulesOfTheServiceItCalls() throws IOException {
        assertEquals("gray", sent(INTERCEPTOR, "http://order-service/hop", "acme"));
        assertEquals("gray", sent(INTERCEPTOR, "http://order-service/hop", "vip-7"));
        assertNull(sent(INTERCEPTOR, "http://order-service/hop", "other"));
        assertNull(sent(INTERCEPTOR, "http://user-service/hop", "acme"), "user-service has no rules");
    }

    @Test
    void aCallMadeWhileServingARequestIsNeverDrawn() throws IOException {
        boolean previous = Lane.serving(true);
        try {
            assertNull(sent(INTERCEPTOR, "http://order-service/hop", "acme"));
        } finally {
            Lane.serving(previous);
        }
    }

    @Test
    void aCallAlreadyInALaneKeepsItAndIsNeverDrawn() throws IOException {
        String previous = Lane.set("dev-alice");
        try {
            assertEquals("dev-alice", sent(INTERCEPTOR, "http://order-service/hop", "acme"));
        } finally {
            Lane.restore(previous);
        }
    }

    @Test
    void withoutNacosNothingIsDrawn() throws IOException {
        assertNull(NacosEntryRules.of(new org.springframework.mock.env.MockEnvironment()));
        assertNull(sent(new LaneClientHttpRequestInterceptor("x-lane"), "http://order-service/hop", "acme"));
    }
}
