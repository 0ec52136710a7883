package io.laneway.lane.spring.cloud;

import feign.RequestInterceptor;
import feign.RequestTemplate;
import io.laneway.lane.Lane;

/**
 * Puts the lane header on an OpenFeign call that has none: {@link Lane#effective()}. Feign applies
 * its interceptors before the call reaches Spring Cloud's load-balancing client, which then sees
 * the header. Spring Cloud OpenFeign gives every client the {@link RequestInterceptor} beans of
 * the application context.
 */
public class LaneFeignInterceptor implements RequestInterceptor {
    private final String header;

    public LaneFeignInterceptor() {
        this(LanewayProperties.DEFAULT_HEADER);
    }

    public LaneFeignInterceptor(String header) {
        if (header == null || header.isBlank()) {
            throw new IllegalArgumentException("empty header name");
        }
        this.header = header.trim();
    }

    @Override
    public void apply(RequestTemplate template) {
        // RequestTemplate's header names are case-insensitive
        if (template.headers().containsKey(header)) {
            return;
        }
        String lane = Lane.effective();
        if (lane != null) {
            template.header(header, lane);
        }
    }

    /** The header this interceptor sets. */
    public String header() {
        return header;
    }
}
