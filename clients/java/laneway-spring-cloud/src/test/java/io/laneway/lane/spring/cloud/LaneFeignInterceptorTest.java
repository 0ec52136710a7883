package io.laneway.lane.spring.cloud;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;

import java.util.List;

import feign.RequestTemplate;
import io.laneway.lane.Lane;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

class LaneFeignInterceptorTest {
    private final LaneFeignInterceptor interceptor = new LaneFeignInterceptor();

    @AfterEach
    void clear() {
        Lane.set(null);
    }

    @Test
    void setsTheLaneOfTheServedRequest() {
        Lane.set("dev-alice");
        RequestTemplate template = new RequestTemplate();
        interceptor.apply(template);
        assertEquals(List.of("dev-alice"), List.copyOf(template.headers().get("x-lane")));
    }

    @Test
    void keepsAHeaderAlreadyThereInAnyCase() {
        Lane.set("dev-alice");
        RequestTemplate template = new RequestTemplate().header("X-Lane", "dev-bob");
        interceptor.apply(template);
        assertEquals(List.of("dev-bob"), List.copyOf(template.headers().get("x-lane")));
    }

    @Test
    void setsNothingWithNoLane() {
        RequestTemplate template = new RequestTemplate();
        interceptor.apply(template);
        assertFalse(template.headers().containsKey("x-lane"));
    }
}
