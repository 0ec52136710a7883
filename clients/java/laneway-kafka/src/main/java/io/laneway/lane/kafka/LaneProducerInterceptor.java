package io.laneway.lane.kafka;

import java.util.Map;

import io.laneway.lane.Lane;
import org.apache.kafka.clients.producer.ProducerInterceptor;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;

/**
 * Stamps every record produced with the current lane ({@link Lane#effective()}: the lane of the
 * request being served, else this instance's own lane), as header {@value LaneRecords#HEADER} and
 * as W3C baggage ({@code lane=...}). A record that already carries {@value LaneRecords#HEADER} keeps
 * it; a record produced in no lane gets neither header.
 *
 * <p>{@code interceptor.classes=io.laneway.lane.kafka.LaneProducerInterceptor}
 */
public class LaneProducerInterceptor implements ProducerInterceptor<Object, Object> {
    @Override
    public ProducerRecord<Object, Object> onSend(ProducerRecord<Object, Object> record) {
        LaneRecords.stamp(record.headers(), Lane.effective());
        return record;
    }

    @Override
    public void onAcknowledgement(RecordMetadata metadata, Exception exception) {}

    @Override
    public void close() {}

    @Override
    public void configure(Map<String, ?> configs) {}
}
