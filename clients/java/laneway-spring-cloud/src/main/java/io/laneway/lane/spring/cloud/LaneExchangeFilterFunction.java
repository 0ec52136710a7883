package io.laneway.lane.spring.cloud;

import java.util.List;

import io.laneway.lane.Lane;
import io.laneway.lane.Probe;
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
 * <p>A call made for a probed request ({@link Probe#forCall()}, read on the same thread) carries
 * the probe mark, and the hop records it is answered with are added to the probe.
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
        String lane = request.headers().containsKey(header) ? null : Lane.effective();
        Probe probe = Probe.forCall();
        if (lane == null && probe == null) {
            return next.exchange(request);
        }
        ClientRequest.Builder b = ClientRequest.from(request);
        if (lane != null) {
            b.header(header, lane);
        }
        if (probe == null) {
            return next.exchange(b.build());
        }
        if (!request.headers().containsKey(Probe.MARK)) {
            b.header(Probe.MARK, probe.mark());
        }
        return next.exchange(b.build())
                .doOnNext(response -> probe.collect(response.headers().asHttpHeaders().getFirst(Probe.HOPS)));
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
