package io.laneway.lane.spring.cloud;

import java.util.List;

import io.laneway.lane.Lane;
import org.springframework.web.reactive.function.client.ClientRequest;
import org.springframework.web.reactive.function.client.ClientResponse;
import org.springframework.web.reactive.function.client.ExchangeFilterFunction;
import org.springframework.web.reactive.function.client.ExchangeFunction;
import reactor.core.publisher.Mono;

/**
 * Puts the lane header on a {@code WebClient} call that has none: {@link Lane#effective()}, read
 * on the thread that subscribes to the call. That is the lane of the request served there in a
 * servlet application that calls {@code block()} (or subscribes) while serving it; a reactive
 * server keeps no lane on its threads, so there only the application's own header, or this
 * instance's own lane, is sent.
 *
 * <p>{@link #addTo} puts it first among the builder's filters, so Spring Cloud's load-balancer
 * filter, which comes later, sees the header.
 */
public class LaneExchangeFilterFunction implements ExchangeFilterFunction {
    private final String header;

    public LaneExchangeFilterFunction() {
        this(LanewayProperties.DEFAULT_HEADER);
    }

    public LaneExchangeFilterFunction(String header) {
        if (header == null || header.isBlank()) {
            throw new IllegalArgumentException("empty header name");
        }
        this.header = header.trim();
    }

    @Override
    public Mono<ClientResponse> filter(ClientRequest request, ExchangeFunction next) {
        if (request.headers().containsKey(header)) {
            return next.exchange(request);
        }
        String lane = Lane.effective();
        if (lane == null) {
            return next.exchange(request);
        }
        return next.exchange(ClientRequest.from(request).header(header, lane).build());
    }

    /** The header this filter sets. */
    public String header() {
        return header;
    }

    /** Puts this filter first in {@code filters}, unless one is there already. */
    public void addTo(List<ExchangeFilterFunction> filters) {
        for (ExchangeFilterFunction filter : filters) {
            if (filter instanceof LaneExchangeFilterFunction) {
                return;
            }
        }
        filters.add(0, this);
    }
}
