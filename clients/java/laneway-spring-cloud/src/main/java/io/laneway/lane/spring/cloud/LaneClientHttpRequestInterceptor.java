package io.laneway.lane.spring.cloud;

import java.io.IOException;
import java.util.List;
import java.util.concurrent.ThreadLocalRandom;
import java.util.function.Function;

import io.laneway.lane.EntryRules;
import io.laneway.lane.Lane;
import io.laneway.lane.Probe;
import org.springframework.core.Ordered;
import org.springframework.http.HttpHeaders;
import org.springframework.http.HttpRequest;
import org.springframework.http.client.ClientHttpRequestExecution;
import org.springframework.http.client.ClientHttpRequestInterceptor;
import org.springframework.http.client.ClientHttpResponse;
import org.springframework.web.client.RestTemplate;

/**
 * Puts the lane header on a {@link RestTemplate} or {@code RestClient} call that has none:
 * {@link Lane#effective()} (the lane of the request served on this thread, else this instance's
 * own lane; nothing when both are {@code null}).
 *
 * <p>A call made for a probed request ({@link Probe#forCall()}) carries the probe mark, and the hop
 * records it is answered with are added to the probe.
 *
 * <p>It must come before Spring Cloud's {@code LoadBalancerInterceptor}, which hands the request
 * as it is then to the load balancer: {@link #addTo} puts it first, and its
 * {@link Ordered#HIGHEST_PRECEDENCE} keeps it first when {@code RestTemplate.setInterceptors}
 * sorts the list.
 */
public class LaneClientHttpRequestInterceptor implements ClientHttpRequestInterceptor, Ordered {
    private final String header;
    private final Function<String, EntryRules> entries;

    public LaneClientHttpRequestInterceptor() {
        this(LanewayProperties.DEFAULT_HEADER);
    }

    public LaneClientHttpRequestInterceptor(String header) {
        this(header, null);
    }

    /**
     * With {@code entries} (the entry rules of a service, by its name), a call that would go in no
     * lane, made outside any request being served ({@link Lane#serving()}), is an RPC entry: it is
     * drawn by the rules of the service it calls (its URI's host, the service id of a
     * load-balanced call), and a lane it is drawn into goes on as the lane header.
     */
    public LaneClientHttpRequestInterceptor(String header, Function<String, EntryRules> entries) {
        if (header == null || header.isBlank()) {
            throw new IllegalArgumentException("empty header name");
        }
        this.header = header.trim();
        this.entries = entries;
    }

    @Override
    public ClientHttpResponse intercept(HttpRequest request, byte[] body, ClientHttpRequestExecution execution)
            throws IOException {
        HttpHeaders headers = request.getHeaders();
        if (!headers.containsKey(header)) {
            String lane = Lane.effective();
            if (lane == null && entries != null && !Lane.serving() && request.getURI().getHost() != null) {
                lane = entries.apply(request.getURI().getHost())
                        .draw(new HeaderCall(headers), ThreadLocalRandom.current().nextInt(100));
            }
            if (lane != null) {
                headers.set(header, lane);
            }
        }
        Probe probe = Probe.forCall();
        if (probe == null) {
            return execution.execute(request, body);
        }
        if (!headers.containsKey(Probe.MARK)) {
            headers.set(Probe.MARK, probe.mark());
        }
        ClientHttpResponse response = execution.execute(request, body);
        probe.collect(response.getHeaders().getFirst(Probe.HOPS));
        return response;
    }

    @Override
    public int getOrder() {
        return Ordered.HIGHEST_PRECEDENCE;
    }

    /** The header this interceptor sets. */
    public String header() {
        return header;
    }

    /** What a draw reads of an HTTP call: its headers. */
    static final class HeaderCall implements EntryRules.Call {
        private final HttpHeaders headers;

        HeaderCall(HttpHeaders headers) {
            this.headers = headers;
        }

        @Override
        public String header(String name) {
            return headers.getFirst(name);
        }
    }

    /** Puts this interceptor first in {@code restTemplate}'s, unless one is there already. */
    public void addTo(RestTemplate restTemplate) {
        addTo(restTemplate.getInterceptors());
    }

    /** Puts this interceptor first in {@code interceptors}, unless one is there already. */
    public void addTo(List<ClientHttpRequestInterceptor> interceptors) {
        for (ClientHttpRequestInterceptor interceptor : interceptors) {
            if (interceptor instanceof LaneClientHttpRequestInterceptor) {
                return;
            }
        }
        interceptors.add(0, this);
    }
}
